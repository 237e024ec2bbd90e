package host

import (
	"context"
	"errors"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/query"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/validate"
)

// Hand-over checks (see meta.Handover). handovers runs on its own
// goroutine (run, started by Host.Start and joined by Host.Stop), not the
// host loop's, so its barriers and scans never delay the reaction to meta
// and leadership changes.
type handovers struct {
	now      func() time.Time
	log      *zap.Logger
	nh       *dragonboat.NodeHost
	db       *pebble.DB
	replicas *Replicas
	meta     *MetaClient
}

const (
	// handoverCheckInterval is how often the leader of a shard that hands
	// partitions over checks whether one can be sealed or closed.
	handoverCheckInterval = 2 * time.Second
	// handoverGrace is how long a sealed hand-over waits before its From
	// shard is checked for copies: a publish accepted under a meta state
	// from before the seal has committed and applied by then.
	handoverGrace = 5 * time.Second
)

// check seals and closes the hand-overs whose From shard this
// node leads, reading the shard's applied state after a read-index
// barrier: a hand-over is sealed once the topic's dedup window has passed
// since it opened and From holds no key record of the partition, and
// closed once handoverGrace has passed since the seal and From holds no
// copy of the partition (nor of its dead-letter partition).
//
// The key check alone would miss a keyed publish the service accepted
// under the open hand-over and committed after the check: sealed, meta
// sends the key's later publishes to To, and the key lives on two shards.
// So before the seal the check fences the partition in From's Raft log
// (fsmpb.Fence), which From applies only while it holds no key record of
// the partition and which refuses every keyed publish of it applied later
// (the service answers those misplaced, and the proxy routes them again
// once its table has the seal). The fence is lifted before the close.
func (h *handovers) check(ctx context.Context, st *meta.State) {
	nowMs := h.now().UnixMilli()
	barrier := map[meta.EventShardID]bool{} // From shard → barrier passed
	for _, ho := range st.Handovers {
		t, ok := st.Topics[ho.Topic]
		if !ok {
			continue
		}
		due := ho.SealedAtMs == 0 && nowMs-ho.OpenedAtMs >= t.DedupWindowMs ||
			ho.SealedAtMs != 0 && nowMs-ho.SealedAtMs >= handoverGrace.Milliseconds()
		if !due {
			continue
		}
		passed, checked := barrier[ho.From]
		if !checked {
			passed = h.leadsApplied(ctx, uint64(ho.From))
			barrier[ho.From] = passed
		}
		if !passed {
			continue
		}
		holds, err := h.holds(ho, t, nowMs)
		if err != nil {
			h.log.Error("check hand-over", zap.Uint64("shard_id", uint64(ho.From)), zap.String("topic", ho.Topic), zap.Uint32("partition", ho.Partition), zap.Error(err))
			continue
		}
		if holds {
			continue
		}
		op, msg := meta.OpSealHandover, "hand-over sealed: keys of the partition move to the new shard"
		if ho.SealedAtMs != 0 {
			op, msg = meta.OpCloseHandover, "hand-over closed: the old shard holds nothing of the partition"
		}
		if held, err := h.fence(ctx, ho, t, ho.SealedAtMs != 0); err != nil || held {
			if err != nil {
				h.log.Debug("hand-over fence not committed yet", zap.Uint64("shard_id", uint64(ho.From)), zap.String("topic", ho.Topic), zap.Uint32("partition", ho.Partition), zap.Error(err))
			}
			continue
		}
		h.log.Info(msg, zap.String("topic", ho.Topic), zap.Uint32("partition", ho.Partition), zap.Uint64("from_shard", uint64(ho.From)), zap.Uint64("to_shard", uint64(ho.To)))
		h.meta.propose(ctx, &meta.Command{Op: op, Name: ho.Topic, Partition: ho.Partition})
	}
}

// run runs check every handoverCheckInterval until stopc closes.
func (h *handovers) run(ctx context.Context, stopc <-chan struct{}) {
	tick := time.NewTicker(handoverCheckInterval)
	defer tick.Stop()
	for {
		select {
		case <-stopc:
			return
		case <-tick.C:
			if st := h.meta.Meta(); len(st.Handovers) > 0 {
				h.check(ctx, st)
			}
		}
	}
}

// holds reports whether ho's From shard still holds what keeps ho in its
// phase: key records while open, copies while sealed.
func (h *handovers) holds(ho meta.Handover, t *meta.Topic, nowMs int64) (bool, error) {
	r := query.New(h.db, uint64(ho.From), nowMs)
	for _, topic := range []string{ho.Topic, ho.Topic + validate.DeadLetterSuffix} {
		var held bool
		var err error
		if ho.SealedAtMs == 0 {
			held, err = r.HoldsKeys(topic, ho.Partition, max(t.Partitions, 1))
		} else {
			held, err = r.HoldsCopies(topic, ho.Partition)
		}
		if err != nil || held {
			return held, err
		}
	}
	return false, nil
}

// errNotLeadingFrom answers a fence proposed on a node that no longer
// leads the hand-over's From shard.
var errNotLeadingFrom = errors.New("host: this node does not lead the hand-over's old shard")

// fence commits the hand-over fence of ho's partition in its From shard
// (lift: its removal) through this node's leading replica; held reports
// that From holds a key record of the partition, so no fence was set.
func (h *handovers) fence(ctx context.Context, ho meta.Handover, t *meta.Topic, lift bool) (held bool, err error) {
	p, _ := h.replicas.leading(uint64(ho.From))
	if p == nil {
		return false, errNotLeadingFrom
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := p.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Fence{Fence: &fsmpb.Fence{
		Topic: ho.Topic, Partition: ho.Partition, Partitions: max(t.Partitions, 1), Lift: lift,
	}}})
	if err != nil {
		return false, err
	}
	return out.GetKeysHeld(), nil
}

// leadsApplied reports whether this node leads shard and has applied
// everything committed before the call (a read-index barrier).
func (h *handovers) leadsApplied(ctx context.Context, shard uint64) bool {
	p, replica := h.replicas.leading(shard)
	if p == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return readIndex(h.nh, shard, replica)(ctx) == nil
}
