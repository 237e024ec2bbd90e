package framework

import (
	"context"
	"errors"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// errNoProxy answers a hook that needs a proxy while none runs.
var errNoProxy = errors.New("framework: no proxy running")

// TransferLeader asks, through the first running proxy, for shard's
// leadership to move to the replica on broker to (0: any replica on
// another broker), with the public Cluster.TransferLeader RPC. It answers
// the broker that led the shard and the one asked to take over once the
// leader queued the request; Raft may still drop it (a lagging target),
// so callers that need the move poll LeaderOf.
func (c *Cluster) TransferLeader(ctx context.Context, shard uint64, to int) (from, target int, err error) {
	addr := ""
	for i, p := range c.Proxies {
		if c.ProxyRunning(i + 1) {
			addr = p.GRPCAddr
			break
		}
	}
	if addr == "" {
		return 0, 0, errNoProxy
	}
	conn, err := c.DialProxy(addr)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := sundialv1.NewClusterClient(conn).TransferLeader(ctx, &sundialv1.TransferLeaderRequest{ShardId: shard, ToNodeId: uint64(to)})
	if err != nil {
		return 0, 0, err
	}
	return int(resp.GetFromNodeId()), int(resp.GetToNodeId()), nil
}
