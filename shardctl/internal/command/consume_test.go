package command

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Subscribe sends two deliveries, answers acks, and waits for the client.
func (fakeServer) Subscribe(stream grpc.BidiStreamingServer[sundialv1.SubscribeRequest, sundialv1.SubscribeResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	for i := range 2 {
		d := &sundialv1.Delivery{MessageId: fmt.Sprintf("m%d", i), Receipt: fmt.Sprintf("r%d", i), Topic: "t", Attempt: 1, DueAtUnixMs: 1893456000000, Payload: []byte(fmt.Sprintf("p%d", i))}
		if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Delivery{Delivery: d}}); err != nil {
			return err
		}
	}
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil
		}
		if a := req.GetAck(); a != nil {
			res := &sundialv1.AckResult{Op: sundialv1.AckResult_OP_ACK, RequestId: a.GetRequestId()}
			for _, r := range a.GetReceipts() {
				res.Results = append(res.Results, &sundialv1.ReceiptResult{Receipt: r})
			}
			if err := stream.Send(&sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_AckResult{AckResult: res}}); err != nil {
				return nil
			}
		}
	}
}

func TestConsume(t *testing.T) {
	addr := serveFakeWithConsumer(t)
	for _, tc := range []struct {
		name      string
		args      []string
		wantCode  int
		wantLines int
		wantErr   string
	}{
		{"count reached", []string{"--proxy", addr, "consume", "--topic", "t", "--count", "2", "--timeout", "5s"}, ExitOK, 2, ""},
		{"count of one", []string{"--proxy", addr, "consume", "--topic", "t", "-n", "1", "--timeout", "5s", "-o", "json"}, ExitOK, 1, ""},
		{"timeout before count", []string{"--proxy", addr, "consume", "--topic", "t", "--count", "5", "--timeout", "300ms"}, ExitFailure, 2, "timed out after 300ms with 2 of 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, stderr := run(t, "", tc.args...)
			if code != tc.wantCode {
				t.Errorf("Run(%q) = %d, want %d (stderr %q)", tc.args, code, tc.wantCode, stderr)
			}
			if lines := strings.Count(out, "\n"); lines != tc.wantLines {
				t.Errorf("Run(%q) printed %d lines, want %d: %q", tc.args, lines, tc.wantLines, out)
			}
			if !strings.Contains(stderr, tc.wantErr) {
				t.Errorf("Run(%q) stderr = %q, want it to contain %q", tc.args, stderr, tc.wantErr)
			}
		})
	}
}

func serveFakeWithConsumer(t *testing.T) string {
	t.Helper()
	return serveFake(t)
}

func TestReorder(t *testing.T) {
	app := buildAppForTest()
	for _, tc := range []struct {
		name string
		in   []string
		want []string
	}{
		{"flags after name", []string{"shardctl", "topics", "create", "orders", "--partitions", "4", "--if-not-exists"},
			[]string{"shardctl", "topics", "create", "--partitions", "4", "--if-not-exists", "--", "orders"}},
		{"global flags kept in place", []string{"shardctl", "-o", "json", "publish", "hi", "--topic", "t"},
			[]string{"shardctl", "-o", "json", "publish", "--topic", "t", "--", "hi"}},
		{"negative value", []string{"shardctl", "publish", "--priority", "-1", "x"},
			[]string{"shardctl", "publish", "--priority", "-1", "--", "x"}},
		{"no positionals", []string{"shardctl", "status", "-o", "yaml"}, []string{"shardctl", "status", "-o", "yaml"}},
		{"explicit separator", []string{"shardctl", "publish", "-t", "t", "--", "-dash"}, []string{"shardctl", "publish", "-t", "t", "--", "-dash"}},
		{"unknown command untouched", []string{"shardctl", "frob", "--x"}, []string{"shardctl", "frob", "--x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := reorder(app, tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("reorder(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
