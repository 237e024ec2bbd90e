// Package validate checks client requests before any tier acts on them.
//
// Every function is pure: it reads the request (and the caller's clock
// reading, passed in as nowMs) and returns the list of field violations,
// empty when the request is acceptable. Proxies and brokers share these
// rules so a request rejected by one tier is rejected the same way by the
// other. Functions are safe for concurrent use and never panic on any
// request value, including nil messages.
package validate

import (
	"fmt"
	"strconv"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Limits bounds the size and reach of client requests. A zero field means
// the value of DefaultLimits.
type Limits struct {
	// MaxMessageBytes bounds one message's payload. Default 1 MiB.
	MaxMessageBytes int64
	// MaxDelay bounds how far in the future a message may be due.
	// Default 366 days.
	MaxDelay time.Duration
	// MaxKeyBytes bounds a message key. Default 512.
	MaxKeyBytes int
	// MaxBatch bounds the number of messages in one publish. Default 10000.
	MaxBatch int
	// MaxHeaderBytes bounds the total size of a message's header names and
	// values. Default 64 KiB.
	MaxHeaderBytes int
	// MaxReceipts bounds the receipts of one ack, nack or extend (a unary
	// call or a subscription frame). Default 10000.
	MaxReceipts int
}

// DefaultLimits are the limits a cluster starts with.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes: 1 << 20,
		MaxDelay:        366 * 24 * time.Hour,
		MaxKeyBytes:     512,
		MaxBatch:        10000,
		MaxHeaderBytes:  64 << 10,
		MaxReceipts:     10000,
	}
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = d.MaxMessageBytes
	}
	if l.MaxDelay <= 0 {
		l.MaxDelay = d.MaxDelay
	}
	if l.MaxKeyBytes <= 0 {
		l.MaxKeyBytes = d.MaxKeyBytes
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = d.MaxBatch
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxReceipts <= 0 {
		l.MaxReceipts = d.MaxReceipts
	}
	return l
}

const (
	maxNameBytes        = 200
	maxFairnessKeyBytes = 512
	// MaxInFlight bounds Start.max_in_flight.
	MaxInFlight = 100000
	// MaxDeliveriesPerFrame bounds Start.max_deliveries_per_frame.
	MaxDeliveriesPerFrame = 1000
	// MinVisibilityTimeout is the shortest non-zero visibility timeout a
	// request may ask for (Start.visibility_timeout_ms,
	// ReceiveRequest.visibility_timeout_ms); 0 means the server default.
	MinVisibilityTimeout = time.Second
	// MaxVisibilityTimeout is the longest visibility timeout a request may ask for.
	MaxVisibilityTimeout = 12 * time.Hour
)

// DefaultGroup is the group a Start with an empty group joins.
const DefaultGroup = "default"

// TopicName checks a topic name: 1 to 200 characters of [A-Za-z0-9._-].
func TopicName(field, name string) []apierr.FieldViolation {
	return checkName(field, name)
}

// GroupName checks a group name with the topic rules. Callers that accept
// an empty group as "default" check for it before calling.
func GroupName(field, name string) []apierr.FieldViolation {
	return checkName(field, name)
}

func checkName(field, name string) []apierr.FieldViolation {
	switch {
	case name == "":
		return violation(field, "must not be empty")
	case len(name) > maxNameBytes:
		return violation(field, fmt.Sprintf("must be at most %d characters, got %d", maxNameBytes, len(name)))
	}
	for i := 0; i < len(name); i++ {
		if !nameByte(name[i]) {
			return violation(field, fmt.Sprintf("may contain only A-Z a-z 0-9 . _ - (bad character at offset %d)", i))
		}
	}
	return nil
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// Message checks one message. field prefixes every violation's field
// ("messages[2]" gives "messages[2].topic"); empty means no prefix.
func Message(field string, m *sundialv1.Message, lim Limits, nowMs int64) []apierr.FieldViolation {
	if m == nil {
		return violation(field, "must be set")
	}
	lim = lim.withDefaults()
	var out []apierr.FieldViolation
	add := func(sub, desc string) {
		out = append(out, apierr.FieldViolation{Field: join(field, sub), Description: desc})
	}
	out = append(out, TopicName(join(field, "topic"), m.GetTopic())...)
	if n := int64(len(m.GetPayload())); n > lim.MaxMessageBytes {
		add("payload", fmt.Sprintf("must be at most %d bytes, got %d", lim.MaxMessageBytes, n))
	}
	if n := int64(len(m.GetText())); n > lim.MaxMessageBytes {
		add("text", fmt.Sprintf("must be at most %d bytes, got %d", lim.MaxMessageBytes, n))
	}
	if m.GetText() != "" && len(m.GetPayload()) > 0 {
		add("text", "must not be set together with payload")
	}
	hb := 0
	for k, v := range m.GetHeaders() {
		hb += len(k) + len(v)
	}
	if hb > lim.MaxHeaderBytes {
		add("headers", fmt.Sprintf("must total at most %d bytes, got %d", lim.MaxHeaderBytes, hb))
	}
	maxDelayMs := lim.MaxDelay.Milliseconds()
	delay, at := m.GetDelayMs(), m.GetDeliverAtUnixMs()
	switch {
	case delay < 0:
		add("delay_ms", "must not be negative")
	case delay > maxDelayMs:
		add("delay_ms", fmt.Sprintf("must be at most %d (max delay %s)", maxDelayMs, lim.MaxDelay))
	}
	switch {
	case at < 0:
		add("deliver_at_unix_ms", "must not be negative")
	case at > 0 && nowMs <= maxInt64-maxDelayMs && at > nowMs+maxDelayMs:
		add("deliver_at_unix_ms", fmt.Sprintf("must be at most %s in the future", lim.MaxDelay))
	}
	if delay != 0 && at != 0 {
		add("deliver_at_unix_ms", "must not be set together with delay_ms")
	}
	if m.GetTtlMs() < 0 {
		add("ttl_ms", "must not be negative")
	}
	if n := len(m.GetKey()); n > lim.MaxKeyBytes {
		add("key", fmt.Sprintf("must be at most %d bytes, got %d", lim.MaxKeyBytes, n))
	}
	if n := len(m.GetFairnessKey()); n > maxFairnessKeyBytes {
		add("fairness_key", fmt.Sprintf("must be at most %d bytes, got %d", maxFairnessKeyBytes, n))
	}
	conflict := m.GetOnKeyConflict()
	if _, ok := sundialv1.KeyConflict_name[int32(conflict)]; !ok {
		add("on_key_conflict", "unknown value "+strconv.Itoa(int(conflict)))
	}
	switch w := m.GetMaxWaitMs(); {
	case w < 0:
		add("max_wait_ms", "must not be negative")
	case w > 0 && conflict != sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE:
		add("max_wait_ms", "may be set only with on_key_conflict DEBOUNCE")
	}
	return out
}

const maxInt64 = int64(^uint64(0) >> 1)

// Publish checks a client's publish request: a request id of at most
// MaxRequestIDBytes and a non-empty batch of at most MaxBatch valid
// messages, none to a dead-letter topic (PublishTopic). Violations of
// message i name "messages[i].<field>".
func Publish(req *sundialv1.PublishRequest, lim Limits, nowMs int64) []apierr.FieldViolation {
	lim = lim.withDefaults()
	if vs := RequestID("request_id", req.GetRequestId()); len(vs) > 0 {
		return vs
	}
	msgs := req.GetMessages()
	switch {
	case len(msgs) == 0:
		return violation("messages", "must not be empty")
	case len(msgs) > lim.MaxBatch:
		return violation("messages", fmt.Sprintf("must hold at most %d messages, got %d", lim.MaxBatch, len(msgs)))
	}
	var out []apierr.FieldViolation
	for i, m := range msgs {
		f := "messages[" + strconv.Itoa(i) + "]"
		out = append(out, Message(f, m, lim, nowMs)...)
		out = append(out, PublishTopic(f+".topic", m.GetTopic())...)
		if t := req.GetTopic(); t != "" && m.GetTopic() != t {
			out = append(out, apierr.FieldViolation{Field: f + ".topic", Description: fmt.Sprintf("must be empty or the request's topic %q, got %q", t, m.GetTopic())})
		}
	}
	return out
}

// Start checks the first frame of a subscription. An empty group is
// accepted and means DefaultGroup.
func Start(s *sundialv1.Start) []apierr.FieldViolation {
	if s == nil {
		return violation("start", "must be set")
	}
	var out []apierr.FieldViolation
	out = append(out, TopicName("start.topic", s.GetTopic())...)
	out = append(out, ConsumerGroup("start.group", s.GetTopic(), s.GetGroup())...)
	if n := s.GetMaxInFlight(); n < 0 || n > MaxInFlight {
		out = append(out, apierr.FieldViolation{Field: "start.max_in_flight", Description: fmt.Sprintf("must be within [0, %d], got %d", MaxInFlight, n)})
	}
	if n := s.GetMaxDeliveriesPerFrame(); n < 0 || n > MaxDeliveriesPerFrame {
		out = append(out, apierr.FieldViolation{Field: "start.max_deliveries_per_frame", Description: fmt.Sprintf("must be within [0, %d], got %d", MaxDeliveriesPerFrame, n)})
	}
	if v := s.GetVisibilityTimeoutMs(); v != 0 && (v < MinVisibilityTimeout.Milliseconds() || v > MaxVisibilityTimeout.Milliseconds()) {
		out = append(out, apierr.FieldViolation{Field: "start.visibility_timeout_ms", Description: fmt.Sprintf("must be 0 or within [%d, %d], got %d", MinVisibilityTimeout.Milliseconds(), MaxVisibilityTimeout.Milliseconds(), v)})
	}
	if m := s.GetAckMode(); sundialv1.AckMode_name[int32(m)] == "" {
		out = append(out, apierr.FieldViolation{Field: "start.ack_mode", Description: "unknown value " + strconv.Itoa(int(m))})
	}
	return out
}

// DueAt is when a valid message becomes due: deliver_at_unix_ms if set (a
// time in the past means now), else now plus delay_ms.
func DueAt(m *sundialv1.Message, nowMs int64) int64 {
	if at := m.GetDeliverAtUnixMs(); at > 0 {
		return max(at, nowMs)
	}
	if d := m.GetDelayMs(); d > 0 {
		return nowMs + d
	}
	return nowMs
}

func join(prefix, field string) string {
	if prefix == "" {
		return field
	}
	return prefix + "." + field
}

func violation(field, desc string) []apierr.FieldViolation {
	return []apierr.FieldViolation{{Field: field, Description: desc}}
}
