package validate

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

const now = int64(1_700_000_000_000)

func fields(vs []apierr.FieldViolation) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Field)
	}
	return out
}

func sameFields(got []apierr.FieldViolation, want []string) bool {
	g := fields(got)
	if len(g) != len(want) {
		return false
	}
	for i := range g {
		if g[i] != want[i] {
			return false
		}
	}
	return true
}

func TestTopicName(t *testing.T) {
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"simple", "orders", true},
		{"all classes", "A-z_0.9", true},
		{"dlq suffix", "orders.dlq", true},
		{"max length", strings.Repeat("a", 200), true},
		{"empty", "", false},
		{"too long", strings.Repeat("a", 201), false},
		{"slash", "a/b", false},
		{"space", "a b", false},
		{"unicode", "tópico", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := TopicName("topic", tc.in)
			if (len(got) == 0) != tc.ok {
				t.Errorf("TopicName(%q) = %v, want ok=%v", tc.in, got, tc.ok)
			}
			if len(got) > 0 && got[0].Field != "topic" {
				t.Errorf("TopicName(%q) field = %q, want %q", tc.in, got[0].Field, "topic")
			}
		})
	}
}

func TestGroupName(t *testing.T) {
	if got := GroupName("group", "workers-1"); len(got) != 0 {
		t.Errorf("GroupName(workers-1) = %v, want none", got)
	}
	if got := GroupName("group", ""); len(got) != 1 {
		t.Errorf("GroupName(\"\") = %v, want one violation", got)
	}
}

func TestMessage(t *testing.T) {
	lim := DefaultLimits()
	maxDelayMs := lim.MaxDelay.Milliseconds()
	tests := []struct {
		name string
		in   *sundialv1.Message
		want []string
	}{
		{"minimal", &sundialv1.Message{Topic: "t"}, nil},
		{"full", &sundialv1.Message{Topic: "t", Payload: []byte("x"), Headers: map[string]string{"a": "b"}, DelayMs: 1000, TtlMs: 5, Key: "k", FairnessKey: "tenant.job", Priority: -3, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: 10}, nil},
		{"nil", nil, []string{"m"}},
		{"no topic", &sundialv1.Message{}, []string{"m.topic"}},
		{"payload at limit", &sundialv1.Message{Topic: "t", Payload: make([]byte, 1<<20)}, nil},
		{"payload too big", &sundialv1.Message{Topic: "t", Payload: make([]byte, 1<<20+1)}, []string{"m.payload"}},
		{"headers too big", &sundialv1.Message{Topic: "t", Headers: map[string]string{"h": strings.Repeat("v", 64<<10)}}, []string{"m.headers"}},
		{"negative delay", &sundialv1.Message{Topic: "t", DelayMs: -1}, []string{"m.delay_ms"}},
		{"delay at max", &sundialv1.Message{Topic: "t", DelayMs: maxDelayMs}, nil},
		{"delay beyond max", &sundialv1.Message{Topic: "t", DelayMs: maxDelayMs + 1}, []string{"m.delay_ms"}},
		{"deliver at in past", &sundialv1.Message{Topic: "t", DeliverAtUnixMs: 1}, nil},
		{"deliver at max", &sundialv1.Message{Topic: "t", DeliverAtUnixMs: now + maxDelayMs}, nil},
		{"deliver at beyond max", &sundialv1.Message{Topic: "t", DeliverAtUnixMs: now + maxDelayMs + 1}, []string{"m.deliver_at_unix_ms"}},
		{"deliver at negative", &sundialv1.Message{Topic: "t", DeliverAtUnixMs: -5}, []string{"m.deliver_at_unix_ms"}},
		{"both delay and deliver at", &sundialv1.Message{Topic: "t", DelayMs: 5, DeliverAtUnixMs: now}, []string{"m.deliver_at_unix_ms"}},
		{"negative ttl", &sundialv1.Message{Topic: "t", TtlMs: -1}, []string{"m.ttl_ms"}},
		{"key too long", &sundialv1.Message{Topic: "t", Key: strings.Repeat("k", 513)}, []string{"m.key"}},
		{"fairness key too long", &sundialv1.Message{Topic: "t", FairnessKey: strings.Repeat("k", 513)}, []string{"m.fairness_key"}},
		{"max wait without debounce", &sundialv1.Message{Topic: "t", MaxWaitMs: 5}, []string{"m.max_wait_ms"}},
		{"negative max wait", &sundialv1.Message{Topic: "t", OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE, MaxWaitMs: -5}, []string{"m.max_wait_ms"}},
		{"unknown conflict", &sundialv1.Message{Topic: "t", OnKeyConflict: 99}, []string{"m.on_key_conflict"}},
		{"several", &sundialv1.Message{Topic: "", DelayMs: -1, TtlMs: -1}, []string{"m.topic", "m.delay_ms", "m.ttl_ms"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Message("m", tc.in, lim, now)
			if !sameFields(got, tc.want) {
				t.Errorf("Message(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestMessageZeroLimitsMeanDefaults(t *testing.T) {
	m := &sundialv1.Message{Topic: "t", Payload: make([]byte, 1000), DelayMs: 1000}
	if got := Message("", m, Limits{}, now); len(got) != 0 {
		t.Errorf("Message(%v, Limits{}) = %v, want none", m, got)
	}
	small := Limits{MaxMessageBytes: 10, MaxDelay: time.Second}
	if got := Message("", m, small, now); !sameFields(got, []string{"payload"}) {
		t.Errorf("Message(%v, small) = %v, want [payload]", m, got)
	}
}

func TestPublish(t *testing.T) {
	lim := DefaultLimits()
	lim.MaxBatch = 3
	ok := &sundialv1.Message{Topic: "t"}
	tests := []struct {
		name string
		in   *sundialv1.PublishRequest
		want []string
	}{
		{"one", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{ok}}, nil},
		{"nil request", nil, []string{"messages"}},
		{"empty batch", &sundialv1.PublishRequest{}, []string{"messages"}},
		{"batch at max", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{ok, ok, ok}}, nil},
		{"batch too big", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{ok, ok, ok, ok}}, []string{"messages"}},
		{"indexed violations", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{ok, {Topic: "bad/"}, {Topic: "t", DelayMs: -1}}}, []string{"messages[1].topic", "messages[2].delay_ms"}},
		{"nil message", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{nil}}, []string{"messages[0]"}},
		{"request topic", &sundialv1.PublishRequest{Topic: "t", Messages: []*sundialv1.Message{ok}}, nil},
		{"message names another topic", &sundialv1.PublishRequest{Topic: "u", Messages: []*sundialv1.Message{ok}}, []string{"messages[0].topic"}},
		{"text", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{Topic: "t", Text: "hi"}}}, nil},
		{"text and payload", &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{Topic: "t", Text: "hi", Payload: []byte("hi")}}}, []string{"messages[0].text"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Publish(tc.in, lim, now)
			if !sameFields(got, tc.want) {
				t.Errorf("Publish(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestStart(t *testing.T) {
	tests := []struct {
		name string
		in   *sundialv1.Start
		want []string
	}{
		{"minimal", &sundialv1.Start{Topic: "t"}, nil},
		{"full", &sundialv1.Start{Topic: "t", Group: "g", MaxInFlight: 100, VisibilityTimeoutMs: 30000, AckMode: sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE}, nil},
		{"nil", nil, []string{"start"}},
		{"no topic", &sundialv1.Start{}, []string{"start.topic"}},
		{"bad group", &sundialv1.Start{Topic: "t", Group: "a b"}, []string{"start.group"}},
		{"dlq topic default group", &sundialv1.Start{Topic: "t.dlq", Group: "default"}, nil},
		{"dlq topic other group", &sundialv1.Start{Topic: "t.dlq", Group: "g"}, []string{"start.group"}},
		{"negative in flight", &sundialv1.Start{Topic: "t", MaxInFlight: -1}, []string{"start.max_in_flight"}},
		{"in flight at max", &sundialv1.Start{Topic: "t", MaxInFlight: MaxInFlight}, nil},
		{"in flight too big", &sundialv1.Start{Topic: "t", MaxInFlight: MaxInFlight + 1}, []string{"start.max_in_flight"}},
		{"visibility too short", &sundialv1.Start{Topic: "t", VisibilityTimeoutMs: 999}, []string{"start.visibility_timeout_ms"}},
		{"visibility min", &sundialv1.Start{Topic: "t", VisibilityTimeoutMs: 1000}, nil},
		{"visibility max", &sundialv1.Start{Topic: "t", VisibilityTimeoutMs: 12 * 3600 * 1000}, nil},
		{"visibility too long", &sundialv1.Start{Topic: "t", VisibilityTimeoutMs: 12*3600*1000 + 1}, []string{"start.visibility_timeout_ms"}},
		{"negative visibility", &sundialv1.Start{Topic: "t", VisibilityTimeoutMs: -1}, []string{"start.visibility_timeout_ms"}},
		{"unknown ack mode", &sundialv1.Start{Topic: "t", AckMode: 7}, []string{"start.ack_mode"}},
		{"frames at max", &sundialv1.Start{Topic: "t", MaxDeliveriesPerFrame: MaxDeliveriesPerFrame}, nil},
		{"frames too big", &sundialv1.Start{Topic: "t", MaxDeliveriesPerFrame: MaxDeliveriesPerFrame + 1}, []string{"start.max_deliveries_per_frame"}},
		{"negative frames", &sundialv1.Start{Topic: "t", MaxDeliveriesPerFrame: -1}, []string{"start.max_deliveries_per_frame"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Start(tc.in)
			if !sameFields(got, tc.want) {
				t.Errorf("Start(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestDueAt(t *testing.T) {
	tests := []struct {
		name string
		in   *sundialv1.Message
		want int64
	}{
		{"now", &sundialv1.Message{}, now},
		{"delay", &sundialv1.Message{DelayMs: 1500}, now + 1500},
		{"deliver at future", &sundialv1.Message{DeliverAtUnixMs: now + 10}, now + 10},
		{"deliver at past", &sundialv1.Message{DeliverAtUnixMs: now - 10}, now},
		{"nil", nil, now},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := DueAt(tc.in, now); got != tc.want {
				t.Errorf("DueAt(%v) = %d, want %d", tc.in, got, tc.want)
			}
		})
	}
}

func FuzzPublish(f *testing.F) {
	seed, _ := proto.Marshal(&sundialv1.PublishRequest{RequestId: "r", Messages: []*sundialv1.Message{{Topic: "t", DelayMs: 5, Key: "k", OnKeyConflict: 3, MaxWaitMs: 9}}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var req sundialv1.PublishRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			return
		}
		_ = Publish(&req, DefaultLimits(), now)
		for _, m := range req.GetMessages() {
			_ = DueAt(m, now)
		}
	})
}
