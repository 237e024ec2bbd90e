package command

import (
	"bytes"
	"context"
	"flag"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// run runs shardctl in-process and returns exit code, stdout and stderr.
func run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errOut bytes.Buffer
	code := Run(ctx, append([]string{"shardctl"}, args...), strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no command", nil, "missing command"},
		{"unknown command", []string{"frob"}, `unknown command "frob"`},
		{"unknown topics command", []string{"topics", "frob"}, `unknown command "frob"`},
		{"unknown flag", []string{"status", "--bogus"}, "flag provided but not defined"},
		{"bad output", []string{"-o", "xml", "status"}, `-o/--output "xml"`},
		{"bad output after command", []string{"status", "--output", "csv"}, `-o/--output "csv"`},
		{"bad timeout", []string{"--timeout", "0s", "status"}, "--timeout 0s"},
		{"status with args", []string{"status", "x"}, "status takes no arguments"},
		{"topics create without name", []string{"topics", "create"}, "exactly one NAME"},
		{"topics create bad kind", []string{"topics", "create", "t", "--kind", "lifo"}, `--kind "lifo"`},
		{"topics create negative partitions", []string{"topics", "create", "t", "--partitions", "-1"}, "--partitions -1"},
		{"topics get two names", []string{"topics", "get", "a", "b"}, "exactly one NAME"},
		{"publish without topic", []string{"publish", "hi"}, "--topic is required"},
		{"publish delay and at", []string{"publish", "--topic", "t", "--delay", "5s", "--at", "2030-01-02T15:04:05Z", "hi"}, "--delay and --at are mutually exclusive"},
		{"publish bad at", []string{"publish", "--topic", "t", "--at", "tomorrow", "hi"}, `--at "tomorrow"`},
		{"publish negative delay", []string{"publish", "--topic", "t", "--delay", "-5s", "hi"}, "--delay -5s"},
		{"publish bad header", []string{"publish", "--topic", "t", "--header", "novalue", "hi"}, `--header "novalue"`},
		{"publish bad duration", []string{"publish", "--topic", "t", "--delay", "soon", "hi"}, "invalid value"},
		{"publish nothing on stdin", []string{"publish", "--topic", "t"}, "no messages"},
		{"consume without topic", []string{"consume"}, "--topic is required"},
		{"consume negative count", []string{"consume", "--topic", "t", "--count", "-1"}, "--count -1"},
		{"consume negative max in flight", []string{"consume", "--topic", "t", "--max-in-flight", "-3"}, "--max-in-flight -3"},
		{"join-token create zero uses", []string{"join-token", "create", "--uses", "0"}, "--uses 0"},
		{"join-token create too many uses", []string{"join-token", "create", "--uses", "1001"}, "--uses 1001"},
		{"join-token create zero expiry", []string{"join-token", "create", "--expires", "0s"}, "--expires 0s"},
		{"join-token create too long", []string{"join-token", "create", "--expires", "721h"}, "--expires 721h0m0s"},
		{"join-token create bad expiry", []string{"join-token", "create", "--expires", "soon"}, "invalid value"},
		{"join-token create with args", []string{"join-token", "create", "x"}, "takes no arguments"},
		{"join-token list with args", []string{"join-token", "list", "x"}, "takes no arguments"},
		{"join-token revoke without id", []string{"join-token", "revoke"}, "one argument, the token's ID"},
		{"join-token revoke two ids", []string{"join-token", "revoke", "a", "b"}, "one argument, the token's ID"},
		{"unknown join-token command", []string{"join-token", "frob"}, `unknown command "frob"`},
		{"add-node missing token file", []string{"add-node", "--join-token-file", "/nonexistent/token", "127.0.0.1:1"}, "--join-token-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliCase{name: tc.name, args: tc.args, wantCode: ExitUsage, wantStderr: tc.wantErr}.checkRun(t, "", tc.args)
		})
	}
}

func TestParseHeaders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{"none", nil, nil, false},
		{"one", []string{"a=b"}, map[string]string{"a": "b"}, false},
		{"value with = and comma", []string{"q=x=1,y=2"}, map[string]string{"q": "x=1,y=2"}, false},
		{"empty value", []string{"a="}, map[string]string{"a": ""}, false},
		{"several", []string{"a=1", "b=2"}, map[string]string{"a": "1", "b": "2"}, false},
		{"no equals", []string{"a"}, nil, true},
		{"empty key", []string{"=v"}, nil, true},
		{"duplicate key", []string{"a=1", "a=2"}, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseHeaders(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("parseHeaders(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("parseHeaders(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// fixedClusterInfo is 4 nodes as the meta leader (node 2) sees them at
// statusNow: node 1 answered 1.5 s ago; node 3, draining, has not answered
// for 12 s and is suspect; node 4 did not answer the latest probe and has
// not answered since node 2 began leading meta.
func fixedClusterInfo() *sundialv1.ClusterInfo {
	active := sundialv1.NodeState_NODE_STATE_ACTIVE
	seen := func(ago time.Duration) int64 { return statusNow.Add(-ago).UnixMilli() }
	return &sundialv1.ClusterInfo{
		RoutingVersion:   42,
		MetaLeaderNodeId: 2,
		Nodes: []*sundialv1.Node{
			{NodeId: 1, GrpcAddr: "127.0.0.1:7501", RaftAddr: "127.0.0.1:7601", State: active, MetaVoter: true, Labels: map[string]string{"zone": "a", "rack": "r1"},
				LastSeenUnixMs: seen(1500 * time.Millisecond)},
			{NodeId: 2, GrpcAddr: "127.0.0.1:7502", RaftAddr: "127.0.0.1:7602", State: active, MetaVoter: true, Labels: map[string]string{"zone": "b"},
				LastSeenUnixMs: seen(0)},
			{NodeId: 3, GrpcAddr: "127.0.0.1:7503", RaftAddr: "127.0.0.1:7603", State: sundialv1.NodeState_NODE_STATE_DRAINING,
				LastSeenUnixMs: seen(12 * time.Second), Unreachable: true, Suspect: true},
			{NodeId: 4, GrpcAddr: "127.0.0.1:7504", RaftAddr: "127.0.0.1:7604", State: active, Unreachable: true},
		},
		Shards: []*sundialv1.Shard{
			{ShardId: 1, LeaderNodeId: 1, Replicas: []*sundialv1.Replica{{ReplicaId: 1, NodeId: 1}, {ReplicaId: 2, NodeId: 2}, {ReplicaId: 3, NodeId: 3}}},
			{ShardId: 2, Replicas: []*sundialv1.Replica{{ReplicaId: 4, NodeId: 2}}},
		},
	}
}

// statusNow is the clock of the status golden files.
var statusNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fixedOperations are a running move (submitted 95 s before statusNow), a
// pending leadership transfer and a finished move, which status leaves out.
func fixedOperations() []*sundialv1.Operation {
	ms := func(ago time.Duration) int64 { return statusNow.Add(-ago).UnixMilli() }
	move := []*sundialv1.OperationStep{{Kind: "add-learner", NodeId: 3}, {Kind: "wait-catch-up", NodeId: 3}, {Kind: "promote", NodeId: 3},
		{Kind: "remove-replica", NodeId: 2}, {Kind: "delete-data", NodeId: 2}}
	return []*sundialv1.Operation{
		{OperationId: 8, Kind: "transfer-leader", ShardId: 1, FromNodeId: 1, ToNodeId: 2, Status: "pending",
			Steps: []*sundialv1.OperationStep{{Kind: "transfer-leader", NodeId: 2}}, CreatedAtMs: ms(5 * time.Second)},
		{OperationId: 7, Kind: "move-replica", ShardId: 2, FromNodeId: 2, ToNodeId: 3, Status: "running", CurrentStep: 1,
			Steps: move, CreatedAtMs: ms(95 * time.Second), StartedAtMs: ms(94 * time.Second)},
		{OperationId: 6, Kind: "move-replica", ShardId: 1, FromNodeId: 3, ToNodeId: 1, Status: "done", CurrentStep: 5,
			Steps: move, CreatedAtMs: ms(time.Hour), StartedAtMs: ms(time.Hour), FinishedAtMs: ms(59 * time.Minute)},
	}
}

// golden compares got with testdata/name, rewriting it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s: %v (run go test -update)", path, err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s:\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func TestRenderCluster(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			var b bytes.Buffer
			if err := renderCluster(&b, format, newClusterView(fixedClusterInfo(), statusNow).withOperations(fixedOperations(), statusNow)); err != nil {
				t.Fatalf("renderCluster(%s) = %v, want nil", format, err)
			}
			golden(t, "status."+format, b.String())
		})
	}
}

func TestWriteDelivery(t *testing.T) {
	d := &sundialv1.Delivery{MessageId: "00ab", Topic: "t", Attempt: 2, DueAtUnixMs: 1893456000000, Payload: []byte("hello world")}
	for _, tc := range []struct {
		format string
		want   string
	}{
		{"table", "2030-01-01T00:00:00.000Z 00ab attempt=2 hello world\n"},
		{"json", `{"message_id":"00ab","topic":"t","attempt":2,"due_at":"2030-01-01T00:00:00.000Z","payload":"hello world"}` + "\n"},
	} {
		t.Run(tc.format, func(t *testing.T) {
			var b bytes.Buffer
			if err := writeDelivery(&b, tc.format, d); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("writeDelivery(%s) = %q, want %q", tc.format, b.String(), tc.want)
			}
		})
	}
}

// fakeServer answers Admin and Producer calls with fixed data.
type fakeServer struct {
	sundialv1.UnimplementedAdminServer
	sundialv1.UnimplementedProducerServer
	sundialv1.UnimplementedConsumerServer
}

// fakeOperations answers ListOperations with fixedOperations.
type fakeOperations struct {
	sundialv1.UnimplementedClusterServer
}

func (fakeOperations) ListOperations(context.Context, *sundialv1.ListOperationsRequest) (*sundialv1.ListOperationsResponse, error) {
	return &sundialv1.ListOperationsResponse{Operations: fixedOperations()}, nil
}

func (fakeServer) GetClusterInfo(context.Context, *sundialv1.GetClusterInfoRequest) (*sundialv1.ClusterInfo, error) {
	return fixedClusterInfo(), nil
}

func (fakeServer) CreateTopic(_ context.Context, req *sundialv1.CreateTopicRequest) (*sundialv1.Topic, error) {
	if req.GetTopic().GetPartitions() > 64 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "topic.partitions", Description: "at most 64"})
	}
	return req.GetTopic(), nil
}

func (fakeServer) Publish(_ context.Context, req *sundialv1.PublishRequest) (*sundialv1.PublishResponse, error) {
	resp := &sundialv1.PublishResponse{RequestId: req.GetRequestId()}
	for i, m := range req.GetMessages() {
		r := &sundialv1.PublishResult{MessageId: "id-" + string(m.GetPayload()), DueAtUnixMs: 1893456000000 + int64(i)}
		if string(m.GetPayload()) == "bad" {
			r = &sundialv1.PublishResult{Error: apierrStatus()}
		}
		resp.Results = append(resp.Results, r)
	}
	return resp, nil
}

func apierrStatus() *spbStatus {
	st, _ := statusFromError(apierr.InvalidArgument(apierr.FieldViolation{Field: "messages[0].payload", Description: "too bad"}))
	return st.Proto()
}

func serveFake(t *testing.T) string {
	t.Helper()
	return serve(t, func(s *grpc.Server) {
		sundialv1.RegisterAdminServer(s, fakeServer{})
		sundialv1.RegisterProducerServer(s, fakeServer{})
		sundialv1.RegisterConsumerServer(s, fakeServer{})
		sundialv1.RegisterClusterServer(s, fakeOperations{})
	})
}

func TestAgainstFakeProxy(t *testing.T) {
	addr := serveFake(t)
	for _, tc := range []struct {
		name       string
		stdin      string
		args       []string
		wantCode   int
		wantOut    string
		wantStderr string
	}{
		{"status json", "", []string{"--proxy", addr, "status", "-o", "json"}, ExitOK, `"routing_version": 42`, ""},
		{"status json carries operations", "", []string{"--proxy", addr, "status", "-o", "json"}, ExitOK, `"step": "2/5 wait-catch-up"`, ""},
		{"status table", "", []string{"--proxy", addr, "status"}, ExitOK, "operations in progress:", ""},
		{"status table shows a suspect node", "", []string{"--proxy", addr, "status"}, ExitOK, "draining (suspect)", ""},
		{"status json carries liveness", "", []string{"--proxy", addr, "status", "-o", "json"}, ExitOK, `"suspect": true`, ""},
		{"status yaml flag after command", "", []string{"status", "--proxy", addr, "-o", "yaml"}, ExitOK, "routing_version: 42", ""},
		{"topics create", "", []string{"--proxy", addr, "topics", "create", "orders", "--partitions", "4", "-o", "json"}, ExitOK, `"partitions": 4`, ""},
		{"topics create violation", "", []string{"--proxy", addr, "topics", "create", "orders", "--partitions", "100"}, ExitFailure, "", "topic.partitions: at most 64"},
		{"publish args", "", []string{"--proxy", addr, "publish", "--topic", "t", "--delay", "5s", "a", "b"}, ExitOK, "id-b", ""},
		{"publish stdin json", "x\n\ny\n", []string{"--proxy", addr, "publish", "--topic", "t", "-o", "json"}, ExitOK, `"message_id": "id-y"`, ""},
		{"publish one bad", "", []string{"--proxy", addr, "publish", "--topic", "t", "ok", "bad"}, ExitFailure, "id-ok", "message 1: invalid argument"},
		{"unreachable proxy", "", []string{"--proxy", "127.0.0.1:1", "--timeout", "300ms", "status"}, ExitFailure, "", "hint: is the proxy running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliCase{tc.name, tc.args, tc.wantCode, tc.wantOut, tc.wantStderr}.checkRun(t, tc.stdin, tc.args)
		})
	}
}
