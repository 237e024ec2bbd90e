package command

import (
	"bytes"
	"context"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestRenderAddNode(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderAddNode(&b, format, addNodeView{NodeID: 4, Addr: "127.0.0.1:7504", ClusterID: "c0ffee"}); err != nil {
				t.Fatalf("renderAddNode(%s) = %v, want nil", format, err)
			}
			golden(t, "addnode."+format, b.String())
		})
	}
}

// fakeInfo answers a cluster of brokers 1-3, node 3 removed.
type fakeInfo struct {
	sundialv1.UnimplementedAdminServer
}

func (fakeInfo) GetClusterInfo(context.Context, *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	n := func(id uint64, addr string, st sundialv1.NodeState) *sundialv1.Node {
		return &sundialv1.Node{NodeId: id, GrpcAddr: addr, State: st}
	}
	return &sundialv1.ClusterInfo{Nodes: []*sundialv1.Node{
		n(1, "10.0.0.1:7501", sundialv1.NodeState_NODE_STATE_ACTIVE),
		n(2, "10.0.0.2:7502", sundialv1.NodeState_NODE_STATE_ACTIVE),
		n(3, "10.0.0.3:7503", sundialv1.NodeState_NODE_STATE_REMOVED),
	}}, nil
}

// fakeWaiting is a waiting broker: it is added once, as node 4, and
// records the addresses it was told to join.
type fakeWaiting struct {
	brokerv1.UnimplementedPeerServer
	mu     sync.Mutex
	joined []string
	refuse bool
}

func (f *fakeWaiting) AddToCluster(_ context.Context, req *brokerv1.AddToClusterRequest) (*brokerv1.AddToClusterResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse {
		return nil, status.Error(codes.AlreadyExists, "node 2 is already registered with another data dir")
	}
	f.joined = req.GetJoin()
	return &brokerv1.AddToClusterResponse{NodeId: 4, ClusterId: "c0ffee"}, nil
}

func TestAddNodeCommand(t *testing.T) {
	proxy := serve(t, func(s *grpc.Server) { sundialv1.RegisterAdminServer(s, fakeInfo{}) })
	waiting := &fakeWaiting{}
	waitingAddr := serve(t, func(s *grpc.Server) { brokerv1.RegisterPeerServer(s, waiting) })
	refusing := serve(t, func(s *grpc.Server) { brokerv1.RegisterPeerServer(s, &fakeWaiting{refuse: true}) })
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now
	for _, tc := range []cliCase{
		{"no address", []string{"add-node"}, ExitUsage, "", "takes one argument"},
		{"not host:port", []string{"add-node", "broker-4"}, ExitUsage, "", "want the broker's gRPC address as host:port"},
		{"added", []string{"add-node", waitingAddr}, ExitOK, "added", ""},
		{"added json", []string{"add-node", waitingAddr, "-o", "json"}, ExitOK, `"node_id": 4`, ""},
		{"unreachable", []string{"add-node", deadAddr}, ExitFailure, "", "no broker answers at " + deadAddr},
		{"refused", []string{"add-node", refusing}, ExitFailure, "", "node 2 is already registered with another data dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stderr := tc.check(t, proxy)
			// The proxy answered: a hint blaming it sends the operator the wrong way.
			if strings.Contains(stderr, "is the proxy running") {
				t.Errorf("Run(%q) stderr = %q, want no hint about the proxy (it answered)", tc.args, stderr)
			}
		})
	}
	waiting.mu.Lock()
	defer waiting.mu.Unlock()
	if want := []string{"10.0.0.1:7501", "10.0.0.2:7502"}; !slices.Equal(waiting.joined, want) {
		t.Errorf("waiting broker was told to join %q, want the active brokers %q", waiting.joined, want)
	}
}
