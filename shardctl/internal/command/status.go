package command

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// clusterView is what shardctl status prints: one object with the nodes,
// the shards and the operations in progress, in every output format. A new
// section is a field here, filled in newClusterView (or runStatus), and a
// function in statusSections.
type clusterView struct {
	RoutingVersion   uint64      `json:"routing_version" yaml:"routing_version"`
	MetaLeaderNodeID uint64      `json:"meta_leader_node_id" yaml:"meta_leader_node_id"`
	Nodes            []nodeView  `json:"nodes" yaml:"nodes"`
	Shards           []shardView `json:"shards" yaml:"shards"`
	// Handovers are the open partition hand-overs (shards add).
	Handovers []handoverView `json:"handovers,omitempty" yaml:"handovers,omitempty"`
	// Operations are the pending and running operations, oldest first.
	Operations []statusOperation `json:"operations" yaml:"operations"`
	// OperationsError says why the operations could not be listed.
	OperationsError string `json:"operations_error,omitempty" yaml:"operations_error,omitempty"`

	now time.Time // when status asked: how long ago nodes were last seen
}

type nodeView struct {
	NodeID    uint64            `json:"node_id" yaml:"node_id"`
	GRPCAddr  string            `json:"grpc_addr" yaml:"grpc_addr"`
	RaftAddr  string            `json:"raft_addr" yaml:"raft_addr"`
	State     string            `json:"state" yaml:"state"`
	MetaVoter bool              `json:"meta_voter" yaml:"meta_voter"`
	Labels    map[string]string `json:"labels" yaml:"labels"`
	// Replicas and Leaders count the shard replicas the node holds and the
	// shards it leads.
	Replicas int `json:"replicas" yaml:"replicas"`
	Leaders  int `json:"leaders" yaml:"leaders"`
	// LastSeenUnixMs, Unreachable and Suspect are what the meta leader
	// knows of the node (sundialv1.Node): when it last answered (0:
	// unknown), whether its latest probe went unanswered, and whether it
	// has gone unseen for suspect_node_timeout. A node that stopped shows
	// them within seconds; its state changes only at dead_node_timeout.
	LastSeenUnixMs int64 `json:"last_seen_unix_ms" yaml:"last_seen_unix_ms"`
	Unreachable    bool  `json:"unreachable" yaml:"unreachable"`
	Suspect        bool  `json:"suspect" yaml:"suspect"`
}

type shardView struct {
	ShardID      uint64   `json:"shard_id" yaml:"shard_id"`
	Replicas     []uint64 `json:"replica_node_ids" yaml:"replica_node_ids"`
	LeaderNodeID uint64   `json:"leader_node_id" yaml:"leader_node_id"`
}

// statusOperation is an operation in progress as status prints it.
type statusOperation struct {
	ID     uint64 `json:"id" yaml:"id"`
	Kind   string `json:"kind" yaml:"kind"`
	Shard  uint64 `json:"shard_id" yaml:"shard_id"`
	From   uint64 `json:"from_node_id,omitempty" yaml:"from_node_id,omitempty"`
	To     uint64 `json:"to_node_id,omitempty" yaml:"to_node_id,omitempty"`
	Status string `json:"status" yaml:"status"`
	// Step is the current step, "2/5 wait-catch-up".
	Step string `json:"step" yaml:"step"`
	// AgeSeconds is the time since the operation was submitted.
	AgeSeconds int64 `json:"age_seconds" yaml:"age_seconds"`
}

// newClusterView renders info, asked for at now.
func newClusterView(info *sundialv1.ClusterInfo, now time.Time) clusterView {
	v := clusterView{
		now:              now,
		RoutingVersion:   info.GetRoutingVersion(),
		MetaLeaderNodeID: info.GetMetaLeaderNodeId(),
		Nodes:            []nodeView{},
		Shards:           []shardView{},
		Handovers:        newHandoverViews(info.GetHandovers()),
		Operations:       []statusOperation{},
	}
	replicas, leaders := map[uint64]int{}, map[uint64]int{}
	for _, s := range info.GetShards() {
		sv := shardView{ShardID: s.GetShardId(), LeaderNodeID: s.GetLeaderNodeId(), Replicas: []uint64{}}
		for _, r := range s.GetReplicas() {
			sv.Replicas = append(sv.Replicas, r.GetNodeId())
			replicas[r.GetNodeId()]++
		}
		if id := s.GetLeaderNodeId(); id != 0 {
			leaders[id]++
		}
		v.Shards = append(v.Shards, sv)
	}
	for _, n := range info.GetNodes() {
		labels := maps.Clone(n.GetLabels())
		if labels == nil {
			labels = map[string]string{}
		}
		v.Nodes = append(v.Nodes, nodeView{
			NodeID: n.GetNodeId(), GRPCAddr: n.GetGrpcAddr(), RaftAddr: n.GetRaftAddr(),
			State: enumName(n.GetState().String(), "NODE_STATE_"), MetaVoter: n.GetMetaVoter(),
			Labels: labels, Replicas: replicas[n.GetNodeId()], Leaders: leaders[n.GetNodeId()],
			LastSeenUnixMs: n.GetLastSeenUnixMs(), Unreachable: n.GetUnreachable(), Suspect: n.GetSuspect(),
		})
	}
	return v
}

// withOperations adds the unfinished operations of ops, ages as of now.
func (v clusterView) withOperations(ops []*sundialv1.Operation, now time.Time) clusterView {
	for _, op := range ops {
		if op.GetStatus() != "pending" && op.GetStatus() != "running" {
			continue
		}
		so := statusOperation{
			ID: op.GetOperationId(), Kind: op.GetKind(), Shard: op.GetShardId(), From: op.GetFromNodeId(),
			To: op.GetToNodeId(), Status: op.GetStatus(), Step: "-",
		}
		if i, steps := int(op.GetCurrentStep()), op.GetSteps(); i >= 0 && i < len(steps) {
			so.Step = fmt.Sprintf("%d/%d %s", i+1, len(steps), steps[i].GetKind())
		}
		if at := op.GetCreatedAtMs(); at > 0 {
			so.AgeSeconds = max(0, now.Sub(time.UnixMilli(at)).Milliseconds()/1000)
		}
		v.Operations = append(v.Operations, so)
	}
	slices.SortFunc(v.Operations, func(a, b statusOperation) int { return cmp.Compare(a.ID, b.ID) })
	return v
}

// enumName turns NODE_STATE_ACTIVE into "active".
func enumName(s, prefix string) string {
	return strings.ToLower(strings.TrimPrefix(s, prefix))
}

// statusSections print the table form of status, one section each,
// separated by a blank line.
var statusSections = []func(io.Writer, clusterView){
	func(w io.Writer, v clusterView) {
		fmt.Fprintf(w, "routing version %d, meta leader %s\n", v.RoutingVersion, nodeOrDash(v.MetaLeaderNodeID))
	},
	renderStatusNodes,
	renderStatusShards,
	renderStatusOperations,
}

func renderStatusNodes(w io.Writer, v clusterView) {
	t := newTable(w, "NODE", "STATE", "LAST SEEN", "LABELS", "GRPC", "RAFT", "META VOTER", "REPLICAS", "LEADERS")
	for _, n := range v.Nodes {
		voter := "no"
		if n.MetaVoter {
			voter = "yes"
		}
		t.AppendRow([]any{n.NodeID, n.stateString(), n.lastSeenString(v.now), labelsString(n.Labels), n.GRPCAddr, n.RaftAddr, voter, n.Replicas, n.Leaders})
	}
	t.Render()
}

// stateString is the node's state, with "suspect" or "unreachable" when
// the meta leader has not heard from it: "active (unreachable)". A dead
// node is just dead.
func (n nodeView) stateString() string {
	switch {
	case n.State == "dead":
		return n.State
	case n.Suspect:
		return n.State + " (suspect)"
	case n.Unreachable:
		return n.State + " (unreachable)"
	}
	return n.State
}

// lastSeenString is how long before now the meta leader last heard from
// the node, "12s ago"; "-" when unknown.
func (n nodeView) lastSeenString(now time.Time) string {
	if n.LastSeenUnixMs == 0 {
		return "-"
	}
	ago := max(0, now.Sub(time.UnixMilli(n.LastSeenUnixMs))).Truncate(time.Second)
	return ago.String() + " ago"
}

func renderStatusShards(w io.Writer, v clusterView) {
	t := newTable(w, "SHARD", "REPLICAS (NODES)", "LEADER")
	for _, s := range v.Shards {
		ids := make([]string, len(s.Replicas))
		for i, id := range s.Replicas {
			ids[i] = fmt.Sprint(id)
		}
		t.AppendRow([]any{s.ShardID, strings.Join(ids, ","), nodeOrDash(s.LeaderNodeID)})
	}
	t.Render()
}

func renderStatusOperations(w io.Writer, v clusterView) {
	switch {
	case v.OperationsError != "":
		fmt.Fprintf(w, "operations: not listed (%s)\n", v.OperationsError)
		return
	case len(v.Operations) == 0:
		fmt.Fprintln(w, "no operations in progress")
		return
	}
	fmt.Fprintln(w, "operations in progress:")
	t := newTable(w, "ID", "KIND", "SHARD", "FROM → TO", "STATUS", "STEP", "AGE")
	for _, op := range v.Operations {
		t.AppendRow([]any{op.ID, op.Kind, op.Shard, nodeOrDash(op.From) + " → " + nodeOrDash(op.To), op.Status, op.Step,
			(time.Duration(op.AgeSeconds) * time.Second).String()})
	}
	t.Render()
}

// labelsString is "rack=r1,zone=a" (keys sorted), or "-".
func labelsString(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k+"="+labels[k])
	}
	return strings.Join(parts, ",")
}

func renderCluster(w io.Writer, format string, v clusterView) error {
	return render(w, format, v, func(w io.Writer) {
		for i, section := range statusSections {
			if i > 0 {
				fmt.Fprintln(w)
			}
			section(w, v)
		}
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
	v := newClusterView(info, time.Now())
	ops, err := cl.Cluster().ListOperations(ctx, &sundialv1.ListOperationsRequest{UnfinishedOnly: true})
	if err != nil {
		// The nodes and shards are still worth printing.
		v.OperationsError = err.Error()
	} else {
		v = v.withOperations(ops.GetOperations(), time.Now())
	}
	return renderCluster(e.stdout, e.output, v)
}
