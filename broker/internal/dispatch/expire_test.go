package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/v2"
	sm "github.com/lni/dragonboat/v4/statemachine"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/proto/receipt"
)

// expiryRig is a rig whose log counts the Expire commands proposed.
type expiryRig struct {
	*rig
	db      *pebble.DB
	expires atomic.Int64
}

func newExpiryRig(t *testing.T, cfg Config) *expiryRig {
	r := &expiryRig{rig: &rig{t: t, log: &shardLog{t: t}}}
	r.log.s, r.db = memStateMachine(t, &r.d)
	propose := func(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Outcome, error) {
		if cmd.GetExpire() != nil {
			r.expires.Add(1)
		}
		return r.log.propose(ctx, cmd)
	}
	r.d = New(shard, r.db, propose, r.log.start, r.log.readIndex, time.Now, cfg, zaptest.NewLogger(t), NewMetrics(prometheus.NewRegistry()))
	return r
}

// applyAll applies cmds as one entry of the log, as one Raft entry would.
func (r *expiryRig) applyAll(cmds ...*fsmpb.Command) uint64 {
	r.t.Helper()
	r.log.mu.Lock()
	defer r.log.mu.Unlock()
	r.log.index++
	data, err := proto.Marshal(&fsmpb.Batch{Commands: cmds})
	if err != nil {
		r.t.Fatalf("marshal: %v", err)
	}
	if _, err := r.log.s.Update([]sm.Entry{{Index: r.log.index, Cmd: data}}); err != nil {
		r.t.Fatalf("Update() error = %v", err)
	}
	return r.log.index
}

func (r *expiryRig) endOf(id receipt.MessageID) fsmpb.EndState {
	r.t.Helper()
	v, closer, err := r.db.Get(keys.End(shard, id[:]))
	if errors.Is(err, pebble.ErrNotFound) {
		return fsmpb.EndState_END_STATE_PENDING
	}
	if err != nil {
		r.t.Fatalf("read end record: %v", err)
	}
	defer closer.Close()
	var end fsmpb.EndRecord
	if err := proto.Unmarshal(v, &end); err != nil {
		r.t.Fatalf("decode end record: %v", err)
	}
	return end.End
}

func (r *expiryRig) counters() *fsmpb.Counters {
	r.t.Helper()
	c := &fsmpb.Counters{}
	v, closer, err := r.db.Get(keys.Counter(shard, "t", "default"))
	if errors.Is(err, pebble.ErrNotFound) {
		return c
	}
	if err != nil {
		r.t.Fatalf("read counters: %v", err)
	}
	defer closer.Close()
	if err := proto.Unmarshal(v, c); err != nil {
		r.t.Fatalf("decode counters: %v", err)
	}
	return c
}

// Copies whose TTL ended while they were leased: the TTL sweep skipped
// them (and forgot their expiry), then their lease ran out. They must be
// dropped as EXPIRED, never delivered, without the leader proposing Expire
// commands in a loop, and the messages behind them must be delivered.
func TestCopiesExpiredUnderLeaseAreDroppedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newExpiryRig(t, Config{MaxLeaseBatch: 2})
		now := time.Now().UnixMilli()
		const stuck = 4
		// One entry: publish, lease each copy until a deadline already past,
		// and run the TTL sweep while they are leased.
		index := r.log.index + 1
		pub := &fsmpb.Publish{NowMs: now - 10_000}
		var cmds []*fsmpb.Command
		var stuckIDs []receipt.MessageID
		for i := range stuck {
			pub.Messages = append(pub.Messages, &fsmpb.StoredMessage{
				Topic: "t", Payload: []byte(fmt.Sprint("stuck-", i)), PublishedAtMs: now - 10_000,
				DueAtMs: now - 10_000, ExpiresAtMs: now - 5_000, DedupWindowMs: 60_000,
			})
			id := receipt.NewMessageID(shard, index, uint32(i))
			stuckIDs = append(stuckIDs, id)
			cmds = append(cmds, &fsmpb.Command{Kind: &fsmpb.Command_Lease{Lease: &fsmpb.Lease{NowMs: now - 10_000, Items: []*fsmpb.LeaseItem{{
				Ref: &fsmpb.MessageRef{MessageId: id[:], Group: "default"}, VisibleAtMs: now - 10_000, DeadlineMs: now - 1,
			}}}}})
		}
		cmds = append([]*fsmpb.Command{{Kind: &fsmpb.Command_Publish{Publish: pub}}}, cmds...)
		cmds = append(cmds, &fsmpb.Command{Kind: &fsmpb.Command_Expire{Expire: &fsmpb.Expire{NowMs: now - 4_000, Limit: 100}}})
		if got := r.applyAll(cmds...); got != index {
			t.Fatalf("entry index = %d, want %d", got, index)
		}
		if c := r.counters(); c.Pending != stuck || c.InFlight != stuck {
			t.Fatalf("counters before = %v, want %d pending and in flight: the sweep skipped the leased copies", c, stuck)
		}
		// Messages behind the stuck copies, due now.
		const behind = 3
		var msgs []*fsmpb.StoredMessage
		for i := range behind {
			msgs = append(msgs, &fsmpb.StoredMessage{Topic: "t", Payload: []byte(fmt.Sprint("behind-", i)), PublishedAtMs: now, DueAtMs: now})
		}
		r.publishMessages(msgs...)

		r.d.Start()
		t.Cleanup(r.d.Stop)
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 10)
		r.d.Attach(c)
		for range behind {
			g, ok := next(c, 5*time.Second)
			if !ok {
				t.Fatalf("a message behind the expired copies was not delivered (%d Expire proposals so far)", r.expires.Load())
			}
			if p := string(g.d.Payload); len(p) < 6 || p[:6] != "behind" {
				t.Fatalf("delivered %q: an expired copy", p)
			}
			r.ack(g.d)
		}
		// Give a spinning leader time to show itself: every round would find
		// the expired copies again and propose another Expire.
		if g, ok := next(c, 500*time.Millisecond); ok {
			t.Fatalf("delivered %q after the messages behind", g.d.Payload)
		}
		t.Logf("Expire proposals: %d", r.expires.Load())
		if n := r.expires.Load(); n > 8 {
			t.Fatalf("Expire proposals = %d, want a handful (one per round that found expired copies)", n)
		}
		for _, id := range stuckIDs {
			if end := r.endOf(id); end != fsmpb.EndState_END_STATE_EXPIRED {
				t.Fatalf("end of stuck message %s = %v, want EXPIRED", id, end)
			}
		}
		if got := r.counters(); got.Pending != 0 || got.InFlight != 0 {
			t.Fatalf("counters after = %v, want 0 pending, 0 in flight", got)
		}
	})
}
