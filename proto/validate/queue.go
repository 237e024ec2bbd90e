package validate

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// DeadLetterSuffix ends the name of a topic's dead-letter topic.
const DeadLetterSuffix = ".dlq"

// Bounds of the queue-semantics requests.
const (
	// MaxReceiveMessages bounds ReceiveRequest.max_messages.
	MaxReceiveMessages = 1000
	// MaxReceiveWait bounds ReceiveRequest.wait_ms.
	MaxReceiveWait = 20 * time.Second
	// MaxPageSize bounds ListMessagesRequest.page_size.
	MaxPageSize = 1000
	// DefaultPageSize is the page size of a ListMessagesRequest with none.
	DefaultPageSize = 100
	// MaxHistogramBuckets bounds the buckets of one DueHistogramRequest.
	MaxHistogramBuckets = 10000
	// DefaultHistogramBuckets is how many buckets a DueHistogramRequest
	// without to_unix_ms covers.
	DefaultHistogramBuckets = 60
	// ReschedulePastSlack is how far in the past a reschedule's
	// deliver_at_unix_ms may lie (clock skew, a slow client) and still mean
	// "now"; earlier is an error.
	ReschedulePastSlack = time.Second
	// MaxRequestIDBytes bounds the request_id of every request that has one
	// (the SDK's ids are 32 bytes): publish, cancel, reschedule, ack, nack,
	// extend.
	MaxRequestIDBytes = 128
)

// ConsumerGroup checks the group a consumer of topic names (empty: the
// default group): a valid group name, and on a dead-letter topic the
// default group only (its dead letters have no other).
func ConsumerGroup(field, topic, group string) []apierr.FieldViolation {
	if group == "" || group == DefaultGroup {
		return nil
	}
	if out := GroupName(field, group); len(out) > 0 {
		return out
	}
	if IsDeadLetter(topic) {
		return violation(field, fmt.Sprintf("dead-letter topic %q is consumed by the %s group only", topic, DefaultGroup))
	}
	return nil
}

// IsDeadLetter reports whether topic names a dead-letter topic.
func IsDeadLetter(topic string) bool {
	return len(topic) > len(DeadLetterSuffix) && strings.HasSuffix(topic, DeadLetterSuffix)
}

// DeadLetterBase is the topic whose dead letters topic holds: topic with
// every trailing ".dlq" removed ("orders.dlq" → "orders"). Any other topic
// is its own base.
func DeadLetterBase(topic string) string {
	for IsDeadLetter(topic) {
		topic = strings.TrimSuffix(topic, DeadLetterSuffix)
	}
	return topic
}

// BucketMs is the width of a histogram bucket in milliseconds
// (UNSPECIFIED is a minute); 0 for an unknown value.
func BucketMs(b sundialv1.HistogramBucket) int64 {
	switch b {
	case sundialv1.HistogramBucket_HISTOGRAM_BUCKET_UNSPECIFIED, sundialv1.HistogramBucket_HISTOGRAM_BUCKET_MINUTE:
		return time.Minute.Milliseconds()
	case sundialv1.HistogramBucket_HISTOGRAM_BUCKET_HOUR:
		return time.Hour.Milliseconds()
	}
	return 0
}

// Selector checks a message selector: a valid topic and exactly one of a
// key (at most MaxKeyBytes) and a message id. The id's form is the
// receipt package's business; callers parse it to route.
func Selector(field string, s *sundialv1.MessageSelector, lim Limits) []apierr.FieldViolation {
	if s == nil {
		return violation(field, "must be set")
	}
	lim = lim.withDefaults()
	out := TopicName(join(field, "topic"), s.GetTopic())
	switch by := s.GetBy().(type) {
	case *sundialv1.MessageSelector_Key:
		switch n := len(by.Key); {
		case n == 0:
			out = append(out, violation(join(field, "key"), "must not be empty")...)
		case n > lim.MaxKeyBytes:
			out = append(out, violation(join(field, "key"), fmt.Sprintf("must be at most %d bytes, got %d", lim.MaxKeyBytes, n))...)
		}
	case *sundialv1.MessageSelector_MessageId:
		if by.MessageId == "" {
			out = append(out, violation(join(field, "message_id"), "must not be empty")...)
		}
	default:
		out = append(out, violation(field, "must name the message by key or by message_id")...)
	}
	return out
}

// Cancel checks a cancel request: a valid selector and request id.
func Cancel(req *sundialv1.CancelRequest, lim Limits) []apierr.FieldViolation {
	return append(Selector("message", req.GetMessage(), lim), RequestID("request_id", req.GetRequestId())...)
}

// RequestID checks the optional request id of a publish, cancel,
// reschedule, ack, nack or extend: at most MaxRequestIDBytes.
func RequestID(field, id string) []apierr.FieldViolation {
	if n := len(id); n > MaxRequestIDBytes {
		return violation(field, fmt.Sprintf("must be at most %d bytes, got %d", MaxRequestIDBytes, n))
	}
	return nil
}

// Reschedule checks a reschedule request: a valid selector and request id
// (RequestID), and at most one
// of delay_ms (not negative, at most MaxDelay) and deliver_at_unix_ms (not
// more than ReschedulePastSlack in the past, at most MaxDelay ahead).
// Neither set means due now.
func Reschedule(req *sundialv1.RescheduleRequest, lim Limits, nowMs int64) []apierr.FieldViolation {
	lim = lim.withDefaults()
	out := append(Selector("message", req.GetMessage(), lim), RequestID("request_id", req.GetRequestId())...)
	maxDelayMs := lim.MaxDelay.Milliseconds()
	delay, at := req.GetDelayMs(), req.GetDeliverAtUnixMs()
	switch {
	case delay < 0:
		out = append(out, violation("delay_ms", "must not be negative")...)
	case delay > maxDelayMs:
		out = append(out, violation("delay_ms", fmt.Sprintf("must be at most %d (max delay %s)", maxDelayMs, lim.MaxDelay))...)
	}
	switch {
	case at < 0:
		out = append(out, violation("deliver_at_unix_ms", "must not be negative")...)
	case at > 0 && at < nowMs-ReschedulePastSlack.Milliseconds():
		out = append(out, violation("deliver_at_unix_ms", fmt.Sprintf("reschedule into the past: %d is %dms before now", at, nowMs-at))...)
	case at > 0 && nowMs <= maxInt64-maxDelayMs && at > nowMs+maxDelayMs:
		out = append(out, violation("deliver_at_unix_ms", fmt.Sprintf("must be at most %s in the future", lim.MaxDelay))...)
	}
	if delay != 0 && at != 0 {
		out = append(out, violation("deliver_at_unix_ms", "must not be set together with delay_ms")...)
	}
	return out
}

// Receive checks a pull request: a valid topic and optional group,
// max_messages within [0, MaxReceiveMessages], wait_ms within [0,
// MaxReceiveWait], and a visibility timeout and ack mode as Start takes.
func Receive(req *sundialv1.ReceiveRequest) []apierr.FieldViolation {
	if req == nil {
		return violation("topic", "must not be empty")
	}
	out := TopicName("topic", req.GetTopic())
	out = append(out, ConsumerGroup("group", req.GetTopic(), req.GetGroup())...)
	if n := req.GetMaxMessages(); n < 0 || n > MaxReceiveMessages {
		out = append(out, violation("max_messages", fmt.Sprintf("must be within [0, %d], got %d", MaxReceiveMessages, n))...)
	}
	if w := req.GetWaitMs(); w < 0 || w > MaxReceiveWait.Milliseconds() {
		out = append(out, violation("wait_ms", fmt.Sprintf("must be within [0, %d], got %d", MaxReceiveWait.Milliseconds(), w))...)
	}
	if v := req.GetVisibilityTimeoutMs(); v != 0 && (v < MinVisibilityTimeout.Milliseconds() || v > MaxVisibilityTimeout.Milliseconds()) {
		out = append(out, violation("visibility_timeout_ms", fmt.Sprintf("must be 0 or within [%d, %d], got %d", MinVisibilityTimeout.Milliseconds(), MaxVisibilityTimeout.Milliseconds(), v))...)
	}
	if m := req.GetAckMode(); sundialv1.AckMode_name[int32(m)] == "" {
		out = append(out, violation("ack_mode", "unknown value "+strconv.Itoa(int(m)))...)
	}
	return out
}

// ListMessages checks a listing request. The page token is the serving
// tier's business and is not checked here.
func ListMessages(req *sundialv1.ListMessagesRequest, lim Limits) []apierr.FieldViolation {
	lim = lim.withDefaults()
	out := TopicName("topic", req.GetTopic())
	if g := req.GetGroup(); g != "" {
		out = append(out, GroupName("group", g)...)
	}
	from, to := req.GetFromUnixMs(), req.GetToUnixMs()
	if from < 0 {
		out = append(out, violation("from_unix_ms", "must not be negative")...)
	}
	if to < 0 {
		out = append(out, violation("to_unix_ms", "must not be negative")...)
	}
	if from > 0 && to > 0 && from > to {
		out = append(out, violation("to_unix_ms", fmt.Sprintf("must not be before from_unix_ms (%d > %d)", from, to))...)
	}
	if n := len(req.GetKeyPrefix()); n > lim.MaxKeyBytes {
		out = append(out, violation("key_prefix", fmt.Sprintf("must be at most %d bytes, got %d", lim.MaxKeyBytes, n))...)
	}
	if req.GetHeaderKey() == "" && req.GetHeaderValue() != "" {
		out = append(out, violation("header_key", "must be set when header_value is")...)
	}
	if n := req.GetPageSize(); n < 0 || n > MaxPageSize {
		out = append(out, violation("page_size", fmt.Sprintf("must be within [0, %d], got %d", MaxPageSize, n))...)
	}
	return out
}

// DueHistogram checks a histogram request. from 0 means nowMs; to 0 means
// from plus DefaultHistogramBuckets buckets; to must be after from and the
// range at most MaxHistogramBuckets buckets wide.
func DueHistogram(req *sundialv1.DueHistogramRequest, nowMs int64) []apierr.FieldViolation {
	out := TopicName("topic", req.GetTopic())
	if g := req.GetGroup(); g != "" {
		out = append(out, GroupName("group", g)...)
	}
	width := BucketMs(req.GetBucket())
	if width == 0 {
		return append(out, violation("bucket", "unknown value "+strconv.Itoa(int(req.GetBucket())))...)
	}
	from, to := req.GetFromUnixMs(), req.GetToUnixMs()
	switch {
	case from < 0:
		out = append(out, violation("from_unix_ms", "must not be negative")...)
	case to < 0:
		out = append(out, violation("to_unix_ms", "must not be negative")...)
	case to > 0:
		if from == 0 {
			from = nowMs
		}
		switch {
		case to <= from:
			out = append(out, violation("to_unix_ms", fmt.Sprintf("must be after from (%d <= %d)", to, from))...)
		case (to-from+width-1)/width > MaxHistogramBuckets:
			out = append(out, violation("to_unix_ms", fmt.Sprintf("range spans %d buckets, at most %d allowed", (to-from+width-1)/width, MaxHistogramBuckets))...)
		}
	}
	return out
}

// TopicGroup checks a (topic, group) pair of the group admin calls; the
// group is required.
func TopicGroup(topic, group string) []apierr.FieldViolation {
	return append(TopicName("topic", topic), GroupName("group", group)...)
}

// PublishTopic checks that a client may publish to topic: dead-letter
// topics are reserved for the brokers.
func PublishTopic(field, topic string) []apierr.FieldViolation {
	if IsDeadLetter(topic) {
		return violation(field, fmt.Sprintf("%q is a dead-letter topic: reserved, publish to %q instead", topic, DeadLetterBase(topic)))
	}
	return nil
}

// Settle checks the receipts and request id of an ack, nack or extend
// (field prefixes the violations: "" for a unary call, "ack" for a
// subscription's ack frame): at most MaxReceipts receipts and a request id
// of at most MaxRequestIDBytes. An empty receipt list is the caller's to
// judge: a unary call refuses it, a subscription frame answers it with no
// results.
func Settle(field string, receipts []string, requestID string, lim Limits) []apierr.FieldViolation {
	lim = lim.withDefaults()
	var out []apierr.FieldViolation
	if n := len(receipts); n > lim.MaxReceipts {
		out = append(out, violation(join(field, "receipts"), fmt.Sprintf("must hold at most %d receipts, got %d", lim.MaxReceipts, n))...)
	}
	return append(out, RequestID(join(field, "request_id"), requestID)...)
}
