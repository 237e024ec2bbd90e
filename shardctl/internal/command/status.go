package command

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// clusterView is the rendered form of a ClusterInfo.
type clusterView struct {
	RoutingVersion   uint64      `json:"routing_version" yaml:"routing_version"`
	MetaLeaderNodeID uint64      `json:"meta_leader_node_id" yaml:"meta_leader_node_id"`
	Nodes            []nodeView  `json:"nodes" yaml:"nodes"`
	Shards           []shardView `json:"shards" yaml:"shards"`
	// Handovers are the open partition hand-overs (shards add).
	Handovers []handoverView `json:"handovers,omitempty" yaml:"handovers,omitempty"`
}

type nodeView struct {
	NodeID    uint64 `json:"node_id" yaml:"node_id"`
	GRPCAddr  string `json:"grpc_addr" yaml:"grpc_addr"`
	RaftAddr  string `json:"raft_addr" yaml:"raft_addr"`
	State     string `json:"state" yaml:"state"`
	MetaVoter bool   `json:"meta_voter" yaml:"meta_voter"`
}

type shardView struct {
	ShardID      uint64   `json:"shard_id" yaml:"shard_id"`
	Replicas     []uint64 `json:"replica_node_ids" yaml:"replica_node_ids"`
	LeaderNodeID uint64   `json:"leader_node_id" yaml:"leader_node_id"`
}

func newClusterView(info *sundialv1.ClusterInfo) clusterView {
	v := clusterView{
		RoutingVersion:   info.GetRoutingVersion(),
		MetaLeaderNodeID: info.GetMetaLeaderNodeId(),
		Nodes:            []nodeView{},
		Shards:           []shardView{},
		Handovers:        newHandoverViews(info.GetHandovers()),
	}
	for _, n := range info.GetNodes() {
		v.Nodes = append(v.Nodes, nodeView{
			NodeID: n.GetNodeId(), GRPCAddr: n.GetGrpcAddr(), RaftAddr: n.GetRaftAddr(),
			State: enumName(n.GetState().String(), "NODE_STATE_"), MetaVoter: n.GetMetaVoter(),
		})
	}
	for _, s := range info.GetShards() {
		sv := shardView{ShardID: s.GetShardId(), LeaderNodeID: s.GetLeaderNodeId(), Replicas: []uint64{}}
		for _, r := range s.GetReplicas() {
			sv.Replicas = append(sv.Replicas, r.GetNodeId())
		}
		v.Shards = append(v.Shards, sv)
	}
	return v
}

// enumName turns NODE_STATE_ACTIVE into "active".
func enumName(s, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s, prefix))
}

func renderCluster(w io.Writer, format string, info *sundialv1.ClusterInfo) error {
	v := newClusterView(info)
	return render(w, format, v, func(w io.Writer) {
		fmt.Fprintf(w, "routing version %d, meta leader %s\n\n", v.RoutingVersion, nodeOrDash(v.MetaLeaderNodeID))
		nt := newTable(w, "NODE", "GRPC", "RAFT", "STATE", "META VOTER")
		for _, n := range v.Nodes {
			voter := "no"
			if n.MetaVoter {
				voter = "yes"
			}
			nt.AppendRow([]any{n.NodeID, n.GRPCAddr, n.RaftAddr, n.State, voter})
		}
		nt.Render()
		fmt.Fprintln(w)
		st := newTable(w, "SHARD", "REPLICAS (NODES)", "LEADER")
		for _, s := range v.Shards {
			ids := make([]string, len(s.Replicas))
			for i, id := range s.Replicas {
				ids[i] = fmt.Sprint(id)
			}
			st.AppendRow([]any{s.ShardID, strings.Join(ids, ","), nodeOrDash(s.LeaderNodeID)})
		}
		st.Render()
		renderHandovers(w, v.Handovers)
	})
}

func nodeOrDash(id uint64) string {
	if id == 0 {
		return "-"
	}
	return fmt.Sprint(id)
}

func runStatus(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 0 {
		return usagef("status takes no arguments, got %q", c.Args().Slice())
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	info, err := cl.Admin().GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		return &opError{op: "status", err: err}
	}
	return renderCluster(e.stdout, e.output, info)
}
