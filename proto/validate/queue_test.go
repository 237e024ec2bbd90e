package validate

import (
	"strings"
	"testing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func byKey(topic, key string) *sundialv1.MessageSelector {
	return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: key}}
}

func byID(topic, id string) *sundialv1.MessageSelector {
	return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_MessageId{MessageId: id}}
}

func TestDeadLetterNames(t *testing.T) {
	for _, tc := range []struct {
		in   string
		dlq  bool
		base string
	}{
		{"orders", false, "orders"},
		{"orders.dlq", true, "orders"},
		{"orders.dlq.dlq", true, "orders"},
		{".dlq", false, ".dlq"},
		{"a.dlqx", false, "a.dlqx"},
	} {
		if got := IsDeadLetter(tc.in); got != tc.dlq {
			t.Errorf("IsDeadLetter(%q) = %v, want %v", tc.in, got, tc.dlq)
		}
		if got := DeadLetterBase(tc.in); got != tc.base {
			t.Errorf("DeadLetterBase(%q) = %q, want %q", tc.in, got, tc.base)
		}
	}
}

func TestSelector(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *sundialv1.MessageSelector
		want []string
	}{
		{"by key", byKey("t", "k"), nil},
		{"by id", byID("t", "00ab"), nil},
		{"key at max", byKey("t", strings.Repeat("k", 512)), nil},
		{"nil", nil, []string{"message"}},
		{"neither", &sundialv1.MessageSelector{Topic: "t"}, []string{"message"}},
		{"bad topic", byKey("a b", "k"), []string{"message.topic"}},
		{"empty key", byKey("t", ""), []string{"message.key"}},
		{"key too long", byKey("t", strings.Repeat("k", 513)), []string{"message.key"}},
		{"empty id", byID("t", ""), []string{"message.message_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Selector("message", tc.in, DefaultLimits())
			if !sameFields(got, tc.want) {
				t.Errorf("Selector(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	if got := Cancel(&sundialv1.CancelRequest{Message: byKey("t", "k")}, Limits{}); len(got) != 0 {
		t.Errorf("Cancel(by key) = %v, want none", got)
	}
	if got := Cancel(&sundialv1.CancelRequest{}, Limits{}); !sameFields(got, []string{"message"}) {
		t.Errorf("Cancel(empty) = %v, want [message]", got)
	}
	long := strings.Repeat("r", MaxRequestIDBytes)
	if got := Cancel(&sundialv1.CancelRequest{Message: byKey("t", "k"), RequestId: long}, Limits{}); len(got) != 0 {
		t.Errorf("Cancel(request id of %d bytes) = %v, want none", len(long), got)
	}
	if got := Cancel(&sundialv1.CancelRequest{Message: byKey("t", "k"), RequestId: long + "r"}, Limits{}); !sameFields(got, []string{"request_id"}) {
		t.Errorf("Cancel(request id of %d bytes) = %v, want [request_id]", len(long)+1, got)
	}
}

func TestReschedule(t *testing.T) {
	lim := DefaultLimits()
	maxDelayMs := lim.MaxDelay.Milliseconds()
	sel := byKey("t", "k")
	for _, tc := range []struct {
		name string
		in   *sundialv1.RescheduleRequest
		want []string
	}{
		{"delay", &sundialv1.RescheduleRequest{Message: sel, DelayMs: 5000}, nil},
		{"neither means now", &sundialv1.RescheduleRequest{Message: sel}, nil},
		{"at future", &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: now + 1000}, nil},
		{"at within slack", &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: now - 1000}, nil},
		{"at into the past", &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: now - 1001}, []string{"deliver_at_unix_ms"}},
		{"at beyond max", &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: now + maxDelayMs + 1}, []string{"deliver_at_unix_ms"}},
		{"at negative", &sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: -1}, []string{"deliver_at_unix_ms"}},
		{"negative delay", &sundialv1.RescheduleRequest{Message: sel, DelayMs: -1}, []string{"delay_ms"}},
		{"delay beyond max", &sundialv1.RescheduleRequest{Message: sel, DelayMs: maxDelayMs + 1}, []string{"delay_ms"}},
		{"both", &sundialv1.RescheduleRequest{Message: sel, DelayMs: 5, DeliverAtUnixMs: now + 5}, []string{"deliver_at_unix_ms"}},
		{"no selector", &sundialv1.RescheduleRequest{DelayMs: 5}, []string{"message"}},
		{"request id", &sundialv1.RescheduleRequest{Message: sel, RequestId: "r-1"}, nil},
		{"request id too long", &sundialv1.RescheduleRequest{Message: sel, RequestId: strings.Repeat("r", MaxRequestIDBytes+1)}, []string{"request_id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Reschedule(tc.in, lim, now)
			if !sameFields(got, tc.want) {
				t.Errorf("Reschedule(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
	got := Reschedule(&sundialv1.RescheduleRequest{Message: sel, DeliverAtUnixMs: 1}, lim, now)
	if len(got) != 1 || !strings.Contains(got[0].Description, "reschedule into the past") {
		t.Errorf("Reschedule(at 1) = %v, want a violation saying \"reschedule into the past\"", got)
	}
}

func TestReceive(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *sundialv1.ReceiveRequest
		want []string
	}{
		{"minimal", &sundialv1.ReceiveRequest{Topic: "t"}, nil},
		{"full", &sundialv1.ReceiveRequest{Topic: "t", Group: "g", MaxMessages: 1000, WaitMs: 20000, VisibilityTimeoutMs: 1000, AckMode: sundialv1.AckMode_ACK_MODE_AT_MOST_ONCE}, nil},
		{"dlq topic", &sundialv1.ReceiveRequest{Topic: "t.dlq"}, nil},
		{"dlq topic default group", &sundialv1.ReceiveRequest{Topic: "t.dlq", Group: "default"}, nil},
		{"dlq topic other group", &sundialv1.ReceiveRequest{Topic: "t.dlq", Group: "g"}, []string{"group"}},
		{"nil", nil, []string{"topic"}},
		{"bad group", &sundialv1.ReceiveRequest{Topic: "t", Group: "a/b"}, []string{"group"}},
		{"too many", &sundialv1.ReceiveRequest{Topic: "t", MaxMessages: 1001}, []string{"max_messages"}},
		{"negative max", &sundialv1.ReceiveRequest{Topic: "t", MaxMessages: -1}, []string{"max_messages"}},
		{"wait too long", &sundialv1.ReceiveRequest{Topic: "t", WaitMs: 20001}, []string{"wait_ms"}},
		{"negative wait", &sundialv1.ReceiveRequest{Topic: "t", WaitMs: -1}, []string{"wait_ms"}},
		{"visibility too short", &sundialv1.ReceiveRequest{Topic: "t", VisibilityTimeoutMs: 999}, []string{"visibility_timeout_ms"}},
		{"unknown ack mode", &sundialv1.ReceiveRequest{Topic: "t", AckMode: 7}, []string{"ack_mode"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Receive(tc.in)
			if !sameFields(got, tc.want) {
				t.Errorf("Receive(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestPublishReservesDeadLetterTopics(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *sundialv1.Message
		want []string
	}{
		{"plain", &sundialv1.Message{Topic: "orders"}, nil},
		{"dlq", &sundialv1.Message{Topic: "orders.dlq"}, []string{"messages[0].topic"}},
		{"key too long", &sundialv1.Message{Topic: "orders", Key: strings.Repeat("k", 513)}, []string{"messages[0].key"}},
		{"max wait without debounce", &sundialv1.Message{Topic: "orders", Key: "k", MaxWaitMs: 10, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_REPLACE}, []string{"messages[0].max_wait_ms"}},
		{"max wait with debounce", &sundialv1.Message{Topic: "orders", Key: "k", MaxWaitMs: 10, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Publish(&sundialv1.PublishRequest{Messages: []*sundialv1.Message{tc.in}}, DefaultLimits(), now)
			if !sameFields(got, tc.want) {
				t.Errorf("Publish(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestListMessages(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   *sundialv1.ListMessagesRequest
		want []string
	}{
		{"minimal", &sundialv1.ListMessagesRequest{Topic: "t"}, nil},
		{"full", &sundialv1.ListMessagesRequest{Topic: "t", Group: "g", FromUnixMs: 1, ToUnixMs: 2, KeyPrefix: "a", HeaderKey: "h", HeaderValue: "v", PageSize: 1000, PageToken: "x"}, nil},
		{"from equals to", &sundialv1.ListMessagesRequest{Topic: "t", FromUnixMs: 5, ToUnixMs: 5}, nil},
		{"dlq", &sundialv1.ListMessagesRequest{Topic: "t.dlq"}, nil},
		{"no topic", &sundialv1.ListMessagesRequest{}, []string{"topic"}},
		{"from after to", &sundialv1.ListMessagesRequest{Topic: "t", FromUnixMs: 6, ToUnixMs: 5}, []string{"to_unix_ms"}},
		{"negative from", &sundialv1.ListMessagesRequest{Topic: "t", FromUnixMs: -1}, []string{"from_unix_ms"}},
		{"page too big", &sundialv1.ListMessagesRequest{Topic: "t", PageSize: 1001}, []string{"page_size"}},
		{"negative page", &sundialv1.ListMessagesRequest{Topic: "t", PageSize: -1}, []string{"page_size"}},
		{"value without key", &sundialv1.ListMessagesRequest{Topic: "t", HeaderValue: "v"}, []string{"header_key"}},
		{"prefix too long", &sundialv1.ListMessagesRequest{Topic: "t", KeyPrefix: strings.Repeat("k", 513)}, []string{"key_prefix"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ListMessages(tc.in, DefaultLimits())
			if !sameFields(got, tc.want) {
				t.Errorf("ListMessages(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestDueHistogram(t *testing.T) {
	hour := sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR
	for _, tc := range []struct {
		name string
		in   *sundialv1.DueHistogramRequest
		want []string
	}{
		{"defaults", &sundialv1.DueHistogramRequest{Topic: "t"}, nil},
		{"range", &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: now, ToUnixMs: now + 60_000}, nil},
		{"to only", &sundialv1.DueHistogramRequest{Topic: "t", ToUnixMs: now + 1}, nil},
		{"max buckets", &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: now, ToUnixMs: now + 10000*60_000}, nil},
		{"too many buckets", &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: now, ToUnixMs: now + 10000*60_000 + 1}, []string{"to_unix_ms"}},
		{"hours", &sundialv1.DueHistogramRequest{Topic: "t", Bucket: hour, FromUnixMs: now, ToUnixMs: now + 10000*3_600_000}, nil},
		{"to before from", &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: now, ToUnixMs: now}, []string{"to_unix_ms"}},
		{"to before now", &sundialv1.DueHistogramRequest{Topic: "t", ToUnixMs: now - 1}, []string{"to_unix_ms"}},
		{"negative from", &sundialv1.DueHistogramRequest{Topic: "t", FromUnixMs: -1}, []string{"from_unix_ms"}},
		{"unknown bucket", &sundialv1.DueHistogramRequest{Topic: "t", Bucket: 9}, []string{"bucket"}},
		{"bad group", &sundialv1.DueHistogramRequest{Topic: "t", Group: "a b"}, []string{"group"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := DueHistogram(tc.in, now)
			if !sameFields(got, tc.want) {
				t.Errorf("DueHistogram(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestTopicGroup(t *testing.T) {
	for _, tc := range []struct {
		topic, group string
		want         []string
	}{
		{"t", "g", nil},
		{"t", "", []string{"group"}},
		{"", "g", []string{"topic"}},
		{"t", "a/b", []string{"group"}},
	} {
		if got := TopicGroup(tc.topic, tc.group); !sameFields(got, tc.want) {
			t.Errorf("TopicGroup(%q, %q) = %v, want fields %v", tc.topic, tc.group, got, tc.want)
		}
	}
}

func TestSettle(t *testing.T) {
	lim := Limits{MaxReceipts: 2}
	if vs := Settle("", []string{"a", "b"}, "id", lim); len(vs) != 0 {
		t.Errorf("Settle(at the limit) = %v, want none", vs)
	}
	if vs := Settle("ack", []string{"a", "b", "c"}, strings.Repeat("x", MaxRequestIDBytes+1), lim); !sameFields(vs, []string{"ack.receipts", "ack.request_id"}) {
		t.Errorf("Settle(over both) = %v, want ack.receipts and ack.request_id", vs)
	}
	if vs := Settle("", make([]string, 10001), "", Limits{}); !sameFields(vs, []string{"receipts"}) {
		t.Errorf("Settle(10001 receipts, default limits) = %v, want receipts", vs)
	}
}
