package service

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// addShardsWait bounds how long AddShards waits for the new shards to
// serve before it answers them as starting.
const addShardsWait = 30 * time.Second

// AddShards proposes add_shards to the meta group (again after each try
// that timed out, until ctx ends: see proposeAddShards) and waits until the new
// shards serve (the meta leader's host puts them on the ring once each has
// a leader and the topics' groups are registered on it) or addShardsWait
// passes, then answers them and the open hand-overs. The same count again
// while that growth starts or hands over (a retry after a timeout) answers
// the same shards instead of FailedPrecondition; a retry after every
// hand-over closed cannot be told from a new request and grows again.
func (c *Cluster) AddShards(ctx context.Context, req *sundialv1.AddShardsRequest) (*sundialv1.AddShardsResponse, error) {
	if bad := validate.AddShards(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	code, data, err := c.proposeAddShards(ctx, int(req.GetCount()))
	if err != nil {
		return nil, err
	}
	switch code {
	case meta.ResultOK, meta.ResultNoop: // Noop: a retry of the growth in progress, answered as it stands
	case meta.ResultExists:
		return nil, status.Error(codes.FailedPrecondition, "shards are being added already (another count): wait until the new shards serve and their hand-overs close (shardctl status); the same request again answers the growth in progress")
	default:
		return nil, status.Error(codes.FailedPrecondition, "cannot place the new shards: fewer active nodes than the replication factor, or the cluster is not bootstrapped")
	}
	var ids []meta.EventShardID
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, status.Errorf(codes.Internal, "add shards: %v", err)
	}
	wctx, cancel := context.WithTimeout(ctx, addShardsWait)
	defer cancel()
	st := c.meta.Meta()
	for !serving(st, ids) {
		changed := c.replicas.Changed()
		if st = c.meta.Meta(); serving(st, ids) {
			break
		}
		select {
		case <-changed:
			st = c.meta.Meta()
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rt := routingTable(st, c.replicas.ShardLeaders(), true)
	resp := &sundialv1.AddShardsResponse{Handovers: rt.Handovers}
	for _, sh := range rt.Shards {
		for _, id := range ids {
			if sh.GetShardId() == uint64(id) {
				resp.Shards = append(resp.Shards, sh)
			}
		}
	}
	return resp, nil
}

// addShardsTryTimeout is the least time one add_shards proposal gets
// before it is proposed again; a try gets a third of the time left when
// that is more. A proposal a follower forwarded to a meta leader that
// stopped is lost; the next try reaches the leader elected meanwhile.
const addShardsTryTimeout = time.Second

// proposeAddShards proposes add_shards for count shards until it commits,
// a try fails for good, or ctx ends (addShardsProposeTimeout when ctx has
// no deadline). A try that times out or meets a temporary
// Dragonboat error (no leader yet, busy, dropped) is proposed again: the
// same count answers the growth the first try may have started
// (meta.ResultNoop), so no second growth starts.
func (c *Cluster) proposeAddShards(ctx context.Context, count int) (uint64, []byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, addShardsProposeTimeout)
		defer cancel()
	}
	for try := 1; ; try++ {
		d, _ := ctx.Deadline()
		tctx, cancel := context.WithTimeout(ctx, max(time.Until(d)/3, addShardsTryTimeout))
		code, data, err := c.meta.ProposeMeta(tctx, &meta.Command{Op: meta.OpAddShards, Count: count, ZoneLabel: meta.ZoneLabel})
		cancel()
		if err == nil || ctx.Err() != nil || !dragonboat.IsTempError(err) || errors.Is(err, dragonboat.ErrClosed) {
			return code, data, err
		}
		c.log.Warn("add shards proposal not committed, proposing again", zap.Int("try", try), zap.Error(err))
		select {
		case <-time.After(addShardsRetryBackoff):
		case <-ctx.Done():
			return 0, nil, err
		}
	}
}

// addShardsProposeTimeout bounds proposing add_shards for a call without
// a deadline: more than a meta election after its leader stopped (~9 s).
const addShardsProposeTimeout = 15 * time.Second

// addShardsRetryBackoff is the pause before an add_shards proposal is
// proposed again after a temporary error that came back at once (a
// shard without a leader yet).
const addShardsRetryBackoff = 100 * time.Millisecond

// serving reports whether st has every shard of ids on the ring.
func serving(st *meta.State, ids []meta.EventShardID) bool {
	for _, id := range ids {
		sh, ok := st.Shards[id]
		if !ok || !sh.Serving() {
			return false
		}
	}
	return true
}
