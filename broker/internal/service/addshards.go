package service

import (
	"context"
	"encoding/json"
	"time"

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

// AddShards proposes add_shards to the meta group and waits until the new
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
	code, data, err := c.host.ProposeMeta(ctx, &meta.Command{Op: meta.OpAddShards, Count: int(req.GetCount()), ZoneLabel: meta.ZoneLabel})
	if err != nil {
		return nil, toStatus(err)
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
	st := c.host.Meta()
	for !serving(st, ids) {
		changed := c.host.Changed()
		if st = c.host.Meta(); serving(st, ids) {
			break
		}
		select {
		case <-changed:
			st = c.host.Meta()
		case <-wctx.Done():
		}
		if wctx.Err() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		return nil, toStatus(ctx.Err())
	}
	rt := routingTable(st, c.host.ShardLeaders(), true)
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
