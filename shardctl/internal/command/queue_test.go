package command

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

const fixedMs = 1893456000000 // 2030-01-01T00:00:00Z

func fixedStats() []*sundialv1.GroupStats {
	return []*sundialv1.GroupStats{
		{Group: "default", Scheduled: 1200, Ready: 3, InFlight: 2, DeadLettered: 1, OldestReadyAgeMs: 1500, LatenessP50Ms: 1.5, LatenessP99Ms: 12},
		{Group: "billing", Scheduled: 40},
	}
}

func fixedTopic() *sundialv1.Topic {
	return &sundialv1.Topic{
		Name: "orders", Kind: sundialv1.TopicKind_TOPIC_KIND_FAIR, Partitions: 4, VisibilityTimeoutMs: 30000, MaxAttempts: 10,
		RetentionMs: 86400000, MaxMessageBytes: 1 << 20, DedupWindowMs: 600000, Groups: []string{"default", "billing"},
		CreatedAtUnixMs: fixedMs, ReleaseRatePerSec: 250, JitterMs: 2000, BackoffBaseMs: 1000, BackoffMaxMs: 300000,
		FairnessWeights: map[string]int32{"tenant-a": 3, "tenant-b": 1}, Stats: fixedStats(),
	}
}

func fixedMessages() *sundialv1.ListMessagesResponse {
	return &sundialv1.ListMessagesResponse{
		Messages: []*sundialv1.MessageInfo{
			{MessageId: "0000000100000000000000070000000", Topic: "orders", Key: "order-1", Payload: []byte("hello"), DueAtUnixMs: fixedMs, PublishedAtUnixMs: fixedMs - 60000,
				Headers: map[string]string{"tenant": "a"}, Copies: []*sundialv1.CopyInfo{{Group: "default", State: sundialv1.CopyState_COPY_STATE_SCHEDULED, VisibleAtUnixMs: fixedMs}}},
			{MessageId: "0000000200000000000000090000000", Topic: "orders", Payload: []byte{0xff, 0xfe}, DueAtUnixMs: fixedMs + 1000},
		},
		NextPageToken: "tok2",
	}
}

func fixedHistogram() []*sundialv1.HistogramCount {
	return []*sundialv1.HistogramCount{{StartUnixMs: fixedMs, Count: 10}, {StartUnixMs: fixedMs + 60000, Count: 3}, {StartUnixMs: fixedMs + 120000, Count: 1}}
}

func (fakeServer) GetTopic(_ context.Context, req *sundialv1.GetTopicRequest) (*sundialv1.Topic, error) {
	if req.GetName() != "orders" {
		return nil, status.Error(codes.NotFound, "no such topic")
	}
	return fixedTopic(), nil
}

func (fakeServer) UpdateTopic(_ context.Context, req *sundialv1.UpdateTopicRequest) (*sundialv1.Topic, error) {
	t := req.GetTopic()
	t.Groups = []string{strings.Join(req.GetUpdateMask(), "+")} // echo the mask for the test
	return t, nil
}

func (fakeServer) DeleteTopic(context.Context, *sundialv1.DeleteTopicRequest) (*sundialv1.DeleteTopicResponse, error) {
	return &sundialv1.DeleteTopicResponse{}, nil
}

func (fakeServer) PurgeTopic(_ context.Context, req *sundialv1.PurgeTopicRequest) (*sundialv1.PurgeTopicResponse, error) {
	if req.GetGroup() == "billing" {
		return &sundialv1.PurgeTopicResponse{Purged: 40}, nil
	}
	return &sundialv1.PurgeTopicResponse{Purged: 1240}, nil
}

func (fakeServer) CreateGroup(_ context.Context, req *sundialv1.CreateGroupRequest) (*sundialv1.Group, error) {
	return &sundialv1.Group{Topic: req.GetTopic(), Name: req.GetGroup()}, nil
}

func (fakeServer) ListGroups(_ context.Context, req *sundialv1.ListGroupsRequest) (*sundialv1.ListGroupsResponse, error) {
	out := &sundialv1.ListGroupsResponse{}
	for _, s := range fixedStats() {
		out.Groups = append(out.Groups, &sundialv1.Group{Topic: req.GetTopic(), Name: s.GetGroup(), Stats: s})
	}
	return out, nil
}

func (fakeServer) DeleteGroup(context.Context, *sundialv1.DeleteGroupRequest) (*sundialv1.DeleteGroupResponse, error) {
	return &sundialv1.DeleteGroupResponse{}, nil
}

func (fakeServer) ListMessages(_ context.Context, req *sundialv1.ListMessagesRequest) (*sundialv1.ListMessagesResponse, error) {
	resp := fixedMessages()
	for _, m := range resp.Messages {
		m.Topic = req.GetTopic()
	}
	return resp, nil
}

func (fakeServer) GetMessage(_ context.Context, req *sundialv1.GetMessageRequest) (*sundialv1.MessageInfo, error) {
	if req.GetMessage().GetKey() == "gone" {
		return nil, status.Error(codes.NotFound, "no such message")
	}
	return fixedMessages().Messages[0], nil
}

func (fakeServer) DueHistogram(context.Context, *sundialv1.DueHistogramRequest) (*sundialv1.DueHistogramResponse, error) {
	return &sundialv1.DueHistogramResponse{Counts: fixedHistogram()}, nil
}

func (fakeServer) RedriveDeadLetters(_ context.Context, req *sundialv1.RedriveDeadLettersRequest) (*sundialv1.RedriveDeadLettersResponse, error) {
	return &sundialv1.RedriveDeadLettersResponse{Moved: max(req.GetMaxMessages(), 7)}, nil
}

func (fakeServer) Cancel(_ context.Context, req *sundialv1.CancelRequest) (*sundialv1.CancelResponse, error) {
	switch req.GetMessage().GetKey() {
	case "gone":
		return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND}, nil
	case "echo-request-id": // names the request id it got
		return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE, MessageId: "for-" + req.GetRequestId()}, nil
	}
	return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE, MessageId: "m1"}, nil
}

func (fakeServer) Reschedule(_ context.Context, req *sundialv1.RescheduleRequest) (*sundialv1.RescheduleResponse, error) {
	return &sundialv1.RescheduleResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT, MessageId: "m1", DueAtUnixMs: fixedMs}, nil
}

func (fakeServer) Receive(_ context.Context, req *sundialv1.ReceiveRequest) (*sundialv1.ReceiveResponse, error) {
	out := &sundialv1.ReceiveResponse{}
	for i := range min(req.GetMaxMessages(), 2) {
		out.Deliveries = append(out.Deliveries, &sundialv1.Delivery{MessageId: "r" + string('0'+i), Receipt: "rc", Topic: req.GetTopic(), Attempt: 1, DueAtUnixMs: fixedMs, Payload: []byte("pulled")})
	}
	return out, nil
}

func (fakeServer) Ack(_ context.Context, req *sundialv1.AckRequest) (*sundialv1.AckResponse, error) {
	out := &sundialv1.AckResponse{}
	for _, r := range req.GetReceipts() {
		out.Results = append(out.Results, &sundialv1.ReceiptResult{Receipt: r})
	}
	return out, nil
}

func TestQueueUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"groups create without topic", []string{"groups", "create", "g"}, "--topic is required"},
		{"groups create without name", []string{"groups", "create", "--topic", "t"}, "exactly one NAME"},
		{"groups delete without yes", []string{"groups", "delete", "--topic", "t", "g"}, "pass --yes"},
		{"groups list without topic", []string{"groups", "list"}, "--topic is required"},
		{"topics update nothing", []string{"topics", "update", "t"}, "nothing to change"},
		{"topics update bad weight", []string{"topics", "update", "t", "--weight", "a=0"}, `--weight "a=0"`},
		{"topics update weight no value", []string{"topics", "update", "t", "--weight", "a"}, `--weight "a"`},
		{"topics update zero attempts", []string{"topics", "update", "t", "--max-attempts", "0"}, "--max-attempts 0"},
		{"topics update zero visibility", []string{"topics", "update", "t", "--visibility-timeout", "0s"}, "--visibility-timeout 0s"},
		{"topics update negative rate", []string{"topics", "update", "t", "--release-rate", "-1"}, "--release-rate -1"},
		{"topics delete without yes", []string{"topics", "delete", "t"}, "pass --yes"},
		{"topics purge without yes", []string{"topics", "purge", "t", "--group", "g"}, "pass --yes"},
		{"messages list without topic", []string{"messages", "list"}, "--topic is required"},
		{"messages list bad from", []string{"messages", "list", "--topic", "t", "--from", "yesterday"}, `--from "yesterday"`},
		{"messages list bad now offset", []string{"messages", "list", "--topic", "t", "--from", "now10m"}, `--from "now10m"`},
		{"messages list to before from", []string{"messages", "list", "--topic", "t", "--from", "now+1h", "--to", "now"}, "--to is before --from"},
		{"messages list bad limit", []string{"messages", "list", "--topic", "t", "--limit", "0"}, "--limit 0"},
		{"messages list bad header", []string{"messages", "list", "--topic", "t", "--header", "x"}, `--header "x"`},
		{"messages get no selector", []string{"messages", "get", "--topic", "t"}, "give --key or --id"},
		{"messages get both", []string{"messages", "get", "--topic", "t", "--key", "k", "--id", "i"}, "mutually exclusive"},
		{"messages histogram bad bucket", []string{"messages", "histogram", "--topic", "t", "--bucket", "day"}, `--bucket "day"`},
		{"messages histogram to in past", []string{"messages", "histogram", "--topic", "t", "--to", "now-1h"}, "--to must be after"},
		{"cancel without topic", []string{"cancel", "--key", "k"}, "--topic is required"},
		{"cancel without selector", []string{"cancel", "--topic", "t"}, "give --key or --id"},
		{"reschedule without time", []string{"reschedule", "--topic", "t", "--key", "k"}, "give --delay or --at"},
		{"reschedule both times", []string{"reschedule", "--topic", "t", "--key", "k", "--delay", "5s", "--at", "now+1m"}, "mutually exclusive"},
		{"reschedule into the past", []string{"reschedule", "--topic", "t", "--key", "k", "--at", "2001-01-01T00:00:00Z"}, "in the past"},
		{"dlq list without topic", []string{"dlq", "list"}, "--topic is required"},
		{"dlq redrive without yes", []string{"dlq", "redrive", "--topic", "t"}, "pass --yes"},
		{"dlq redrive negative max", []string{"dlq", "redrive", "--topic", "t", "--max", "-1", "--yes"}, "--max -1"},
		{"publish bad conflict", []string{"publish", "--topic", "t", "--key", "k", "--on-conflict", "merge", "x"}, `--on-conflict "merge"`},
		{"publish conflict without key", []string{"publish", "--topic", "t", "--on-conflict", "replace", "x"}, "needs --key"},
		{"publish max wait without debounce", []string{"publish", "--topic", "t", "--key", "k", "--max-wait", "1m", "x"}, "only for --on-conflict debounce"},
		{"receive without topic", []string{"receive"}, "--topic is required"},
		{"receive too many", []string{"receive", "--topic", "t", "--max", "1001"}, "--max 1001"},
		{"receive long wait", []string{"receive", "--topic", "t", "--wait", "21s"}, "--wait 21s"},
		{"unknown groups command", []string{"groups", "frob"}, `unknown command "frob"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliCase{name: tc.name, args: tc.args, wantCode: ExitUsage, wantStderr: tc.wantErr}.checkRun(t, "", tc.args)
		})
	}
}

func TestParseWhen(t *testing.T) {
	now := time.UnixMilli(fixedMs).UTC()
	for _, tc := range []struct {
		in      string
		want    time.Time
		wantErr bool
	}{
		{"now", now, false},
		{"now+10m", now.Add(10 * time.Minute), false},
		{"now-1h30m", now.Add(-90 * time.Minute), false},
		{"2030-01-02T03:04:05Z", time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), false},
		{"now10m", time.Time{}, true},
		{"now+soon", time.Time{}, true},
		{"tomorrow", time.Time{}, true},
	} {
		got, err := parseWhen("from", tc.in, now)
		if (err != nil) != tc.wantErr || !got.Equal(tc.want) {
			t.Errorf("parseWhen(%q) = %v, %v, want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestTopicUpdateMask(t *testing.T) {
	var got *sundialv1.UpdateTopicRequest
	app := &cli.App{Commands: []*cli.Command{topicsUpdateCommand(func(c *cli.Context) error {
		var err error
		got, err = topicUpdateFromFlags(c)
		return err
	})}}
	if err := app.Run([]string{"x", "update", "--max-attempts", "5", "--jitter", "0s", "--weight", "a=3", "--weight", "b=1", "orders"}); err != nil {
		t.Fatalf("update = %v", err)
	}
	if want := "max_attempts jitter_ms fairness_weights"; strings.Join(sortedMask(got.GetUpdateMask()), " ") != "fairness_weights jitter_ms max_attempts" {
		t.Errorf("update_mask = %v, want exactly %s", got.GetUpdateMask(), want)
	}
	if tp := got.GetTopic(); tp.GetMaxAttempts() != 5 || tp.GetFairnessWeights()["a"] != 3 || tp.GetVisibilityTimeoutMs() != 0 {
		t.Errorf("topic = %v, want max attempts 5, weight a=3, visibility untouched", tp)
	}
}

func sortedMask(m []string) []string {
	out := append([]string(nil), m...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestRenderQueueViews(t *testing.T) {
	for _, format := range []string{"table", "json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			for _, tc := range []struct {
				name   string
				render func(w, stderr *bytes.Buffer) error
			}{
				{"topic", func(w, _ *bytes.Buffer) error { return renderTopic(w, format, fixedTopic()) }},
				{"groups", func(w, _ *bytes.Buffer) error {
					var gs []*sundialv1.Group
					for _, s := range fixedStats() {
						gs = append(gs, &sundialv1.Group{Topic: "orders", Name: s.GetGroup(), Stats: s})
					}
					return renderGroups(w, format, gs)
				}},
				{"messages", func(w, stderr *bytes.Buffer) error { return renderMessages(w, stderr, format, fixedMessages()) }},
				{"message", func(w, _ *bytes.Buffer) error { return renderMessage(w, format, fixedMessages().Messages[0]) }},
				{"histogram", func(w, _ *bytes.Buffer) error { return renderHistogram(w, format, fixedHistogram()) }},
				{"change", func(w, _ *bytes.Buffer) error {
					return renderChange(w, format, changeView{Outcome: "in_flight", MessageID: "m1", DueAt: formatMs(fixedMs)})
				}},
			} {
				var out, stderr bytes.Buffer
				if err := tc.render(&out, &stderr); err != nil {
					t.Fatalf("render %s = %v", tc.name, err)
				}
				golden(t, tc.name+"."+format, out.String())
			}
		})
	}
}

func TestQueueAgainstFakeProxy(t *testing.T) {
	addr := serveFake(t)
	for _, tc := range []cliCase{
		{"topics get stats", []string{"topics", "get", "orders"}, ExitOK, "LATENESS P99", ""},
		{"topics get missing", []string{"topics", "get", "nope"}, ExitFailure, "", "not found"},
		{"topics update mask", []string{"topics", "update", "orders", "--release-rate", "100", "--backoff-max", "1m", "-o", "json"}, ExitOK, `"backoff_max_ms+release_rate_per_sec"`, ""},
		{"topics delete", []string{"topics", "delete", "orders", "--yes"}, ExitOK, "deleted: orders", ""},
		{"topics purge group", []string{"topics", "purge", "orders", "--group", "billing", "--yes", "-o", "json"}, ExitOK, `"purged": 40`, ""},
		{"groups create", []string{"groups", "create", "--topic", "orders", "audit"}, ExitOK, "audit", ""},
		{"groups list", []string{"groups", "list", "--topic", "orders"}, ExitOK, "1200", ""},
		{"groups delete", []string{"groups", "delete", "--topic", "orders", "billing", "--yes"}, ExitOK, "deleted: billing", ""},
		{"messages list", []string{"messages", "list", "--topic", "orders", "--from", "now", "--to", "now+1h", "--key-prefix", "order-"}, ExitOK, "order-1", "more: --page-token tok2"},
		{"messages get", []string{"messages", "get", "--topic", "orders", "--key", "order-1"}, ExitOK, "scheduled", ""},
		{"messages get missing", []string{"messages", "get", "--topic", "orders", "--key", "gone"}, ExitFailure, "", "not found"},
		{"messages histogram", []string{"messages", "histogram", "--topic", "orders", "--bucket", "hour"}, ExitOK, "██████████", ""},
		{"dlq list", []string{"dlq", "list", "--topic", "orders", "-o", "json"}, ExitOK, `"topic": "orders.dlq"`, ""},
		{"dlq redrive", []string{"dlq", "redrive", "--topic", "orders", "--max", "3", "--yes"}, ExitOK, "moved: 7", ""},
		{"cancel done", []string{"cancel", "--topic", "orders", "--key", "order-1"}, ExitOK, "done", ""},
		{"cancel not found exits 0", []string{"cancel", "--topic", "orders", "--key", "gone", "-o", "json"}, ExitOK, `"outcome": "not_found"`, ""},
		{"cancel with a request id", []string{"cancel", "--topic", "orders", "--key", "echo-request-id", "--request-id", "op-7"}, ExitOK, "for-op-7", ""},
		{"reschedule", []string{"reschedule", "--topic", "orders", "--id", "m1", "--delay", "10m"}, ExitOK, "in_flight", ""},
		{"receive", []string{"receive", "--topic", "orders", "--max", "5", "--wait", "1s"}, ExitOK, "pulled", ""},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.check(t, addr) })
	}
}
