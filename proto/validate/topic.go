package validate

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// Bounds of a topic's settings and of the admin and consumer calls.
const (
	// MaxPartitions bounds Topic.partitions.
	MaxPartitions = 1024
	// MaxReleaseRatePerSec bounds Topic.release_rate_per_sec (0 is
	// unlimited).
	MaxReleaseRatePerSec = 1_000_000
	// MaxJitter bounds Topic.jitter_ms.
	MaxJitter = 24 * time.Hour
	// MaxExtend bounds how far one extend moves a lease (extend_ms); 0
	// means the visibility timeout.
	MaxExtend = 12 * time.Hour
)

// CreateTopic checks a topic to create, where a zero setting means the
// cluster default: a valid name that is not a dead-letter topic's (those
// the brokers create), a known kind, partitions within [0, MaxPartitions],
// a visibility timeout of 0 or within [MinVisibilityTimeout,
// MaxVisibilityTimeout], durations and max_attempts not negative,
// max_message_bytes within [0, lim.MaxMessageBytes], valid group names and
// the delivery policy TopicSettings checks.
func CreateTopic(t *sundialv1.Topic, lim Limits) []apierr.FieldViolation {
	if t == nil {
		return violation("topic", "must be set")
	}
	out := TopicName("topic.name", t.GetName())
	if IsDeadLetter(t.GetName()) {
		out = append(out, violation("topic.name", "the suffix "+DeadLetterSuffix+" is reserved for dead-letter topics")...)
	}
	return append(out, settings(t, lim, true)...)
}

// TopicSettings checks the settings of a topic as stored (every default
// filled in), as an update leaves them: a known kind, partitions within
// [1, MaxPartitions], a visibility timeout within [MinVisibilityTimeout,
// MaxVisibilityTimeout], max_attempts at least 1, retention and dedup
// window not negative (0 keeps messages until completed), max_message_bytes
// within [1, lim.MaxMessageBytes], valid group names, a release rate within
// [0, MaxReleaseRatePerSec], jitter within [0, MaxJitter], backoff
// durations not negative with base at most max (when max is set), and
// positive fairness weights. The name is not checked.
func TopicSettings(t *sundialv1.Topic, lim Limits) []apierr.FieldViolation {
	if t == nil {
		return violation("topic", "must be set")
	}
	return settings(t, lim, false)
}

// settings checks t's settings; with zeroDefaults a zero partitions,
// visibility timeout, max attempts or max message size means the cluster
// default and is accepted.
func settings(t *sundialv1.Topic, lim Limits, zeroDefaults bool) []apierr.FieldViolation {
	lim = lim.withDefaults()
	var out []apierr.FieldViolation
	add := func(field, desc string) {
		out = append(out, apierr.FieldViolation{Field: "topic." + field, Description: desc})
	}
	unset := func(v int64) bool { return zeroDefaults && v == 0 }
	if _, ok := sundialv1.TopicKind_name[int32(t.GetKind())]; !ok {
		add("kind", "unknown value "+strconv.Itoa(int(t.GetKind())))
	}
	if n := t.GetPartitions(); !unset(int64(n)) && (n < 1 || n > MaxPartitions) {
		add("partitions", fmt.Sprintf("must be within [1, %d], got %d", MaxPartitions, n))
	}
	if v := t.GetVisibilityTimeoutMs(); !unset(v) && (v < MinVisibilityTimeout.Milliseconds() || v > MaxVisibilityTimeout.Milliseconds()) {
		add("visibility_timeout_ms", fmt.Sprintf("must be within [%d, %d] (1s to 12h), got %d", MinVisibilityTimeout.Milliseconds(), MaxVisibilityTimeout.Milliseconds(), v))
	}
	if n := t.GetMaxAttempts(); !unset(int64(n)) && n < 1 {
		add("max_attempts", fmt.Sprintf("must be at least 1, got %d", n))
	}
	if v := t.GetRetentionMs(); v < 0 {
		add("retention_ms", "must not be negative (0 keeps messages until completed)")
	}
	if v := t.GetDedupWindowMs(); v < 0 {
		add("dedup_window_ms", "must not be negative")
	}
	if n := t.GetMaxMessageBytes(); !unset(n) && (n < 1 || n > lim.MaxMessageBytes) {
		add("max_message_bytes", fmt.Sprintf("must be within [1, %d] (the cluster's maximum message size), got %d", lim.MaxMessageBytes, n))
	}
	for i, g := range t.GetGroups() {
		out = append(out, GroupName("topic.groups["+strconv.Itoa(i)+"]", g)...)
	}
	if r := t.GetReleaseRatePerSec(); r < 0 || r > MaxReleaseRatePerSec {
		add("release_rate_per_sec", fmt.Sprintf("must be within [0 (unlimited), %d], got %g", MaxReleaseRatePerSec, r))
	}
	if j := t.GetJitterMs(); j < 0 || j > MaxJitter.Milliseconds() {
		add("jitter_ms", fmt.Sprintf("must be within [0, %d] (24h), got %d", MaxJitter.Milliseconds(), j))
	}
	base, ceiling := t.GetBackoffBaseMs(), t.GetBackoffMaxMs()
	switch {
	case base < 0:
		add("backoff_base_ms", "must not be negative")
	case ceiling < 0:
		add("backoff_max_ms", "must not be negative")
	case ceiling > 0 && base > ceiling:
		add("backoff_base_ms", fmt.Sprintf("must not exceed backoff_max_ms (%d > %d)", base, ceiling))
	}
	weights := t.GetFairnessWeights()
	names := make([]string, 0, len(weights))
	for k := range weights {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if w := weights[k]; w <= 0 {
			add("fairness_weights["+k+"]", fmt.Sprintf("must be positive, got %d", w))
		}
	}
	return out
}

// ListTopics checks a topic listing: page_size within [0, MaxPageSize]
// (0 means DefaultPageSize).
func ListTopics(req *sundialv1.ListTopicsRequest) []apierr.FieldViolation {
	if n := req.GetPageSize(); n < 0 || n > MaxPageSize {
		return violation("page_size", fmt.Sprintf("must be within [0, %d], got %d", MaxPageSize, n))
	}
	return nil
}

// ExtendMs checks an extend's extend_ms: within [0, MaxExtend].
func ExtendMs(field string, ms int64) []apierr.FieldViolation {
	if ms < 0 || ms > MaxExtend.Milliseconds() {
		return violation(field, fmt.Sprintf("must be within [0, %d] (12h), got %d", MaxExtend.Milliseconds(), ms))
	}
	return nil
}

// NackDelayMs checks a nack's delay_ms: within [0, lim.MaxDelay] (0 means
// the topic's backoff).
func NackDelayMs(field string, ms int64, lim Limits) []apierr.FieldViolation {
	lim = lim.withDefaults()
	if ms < 0 || ms > lim.MaxDelay.Milliseconds() {
		return violation(field, fmt.Sprintf("must be within [0, %d] (max delay %s), got %d", lim.MaxDelay.Milliseconds(), lim.MaxDelay, ms))
	}
	return nil
}
