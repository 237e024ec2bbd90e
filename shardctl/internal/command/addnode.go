package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/client"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func addNodeCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:      "add-node",
		Usage:     "add a broker started with --wait-for-add to the cluster",
		ArgsUsage: "ADDR",
		Description: "ADDR is the waiting broker's gRPC address. shardctl reads the cluster's brokers from the proxy\n" +
			"and asks the waiting broker to join them; the cluster gives it a node id (or keeps its --node-id)\n" +
			"and it starts serving, with no shard replicas until a rebalance. A cluster serving TLS admits it\n" +
			"only with a join token: --join-token-file, or the broker's own --join-token-file.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "join-token-file", Usage: "`FILE` holding the join token (join-token create) the broker presents"},
		},
		Action: act,
	}
}

// addNodeView is the answer of add-node.
type addNodeView struct {
	NodeID    uint64 `json:"node_id" yaml:"node_id"`
	Addr      string `json:"addr" yaml:"addr"`
	ClusterID string `json:"cluster_id" yaml:"cluster_id"`
}

func renderAddNode(w io.Writer, format string, v addNodeView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "NODE", "ADDR", "CLUSTER", "STATE")
		t.AppendRow([]any{v.NodeID, v.Addr, v.ClusterID, "added"})
		t.Render()
	})
}

func runAddNode(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() != 1 {
		return usagef("add-node takes one argument, the waiting broker's gRPC ADDR (host:port), got %q", c.Args().Slice())
	}
	addr := c.Args().First()
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usagef("add-node %q: want the broker's gRPC address as host:port", addr)
	}
	var token string
	if f := c.String("join-token-file"); f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return usagef("--join-token-file: %v", err)
		}
		if token = strings.TrimSpace(string(b)); token == "" {
			return usagef("--join-token-file %s is empty: write the token join-token create printed into it", f)
		}
	}
	op := "add-node " + addr
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		info, err := cl.Admin().GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return &opError{op: op + ": read the cluster's brokers", err: err}
		}
		var seeds []string
		for _, n := range info.GetNodes() {
			if n.GetState() == sundialv1.NodeState_NODE_STATE_ACTIVE && n.GetGrpcAddr() != "" {
				seeds = append(seeds, n.GetGrpcAddr())
			}
		}
		if len(seeds) == 0 {
			return &opError{op: op, err: errors.New("the cluster lists no active broker")}
		}
		creds, err := e.credentials()
		if err != nil {
			return usagef("%v", err)
		}
		resp, err := addToCluster(ctx, creds, addr, seeds, token)
		if err != nil {
			return &opError{op: op, err: err}
		}
		return renderAddNode(e.stdout, e.output, addNodeView{NodeID: resp.GetNodeId(), Addr: addr, ClusterID: resp.GetClusterId()})
	})
}

// addToCluster asks the waiting broker at addr to join the brokers at
// seeds. An address where nothing answers gets its own message: the
// broker is not running there, or not reachable from here. That error
// carries no gRPC code, so it gets no hint about the proxy, which answered.
func addToCluster(ctx context.Context, creds credentials.TransportCredentials, addr string, seeds []string, token string) (*brokerv1.AddToClusterResponse, error) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	resp, err := brokerv1.NewPeerClient(conn).AddToCluster(ctx, &brokerv1.AddToClusterRequest{Join: seeds, JoinToken: token})
	if status.Code(err) == codes.Unavailable && conn.GetState().String() != "READY" {
		return nil, fmt.Errorf("no broker answers at %s (is it running with --wait-for-add, and reachable from here?): %s", addr, status.Convert(err).Message())
	}
	return resp, err
}
