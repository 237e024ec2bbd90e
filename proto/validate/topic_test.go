package validate

import (
	"strings"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// stored is a topic with every setting filled in, as an update sees it.
func stored() *sundialv1.Topic {
	return &sundialv1.Topic{
		Name: "orders", Partitions: 4, VisibilityTimeoutMs: 30_000, MaxAttempts: 10,
		RetentionMs: 3_600_000, MaxMessageBytes: 1 << 20, DedupWindowMs: 60_000,
	}
}

func TestCreateTopic(t *testing.T) {
	lim := Limits{MaxMessageBytes: 1000}
	for _, tc := range []struct {
		name string
		in   *sundialv1.Topic
		want []string
	}{
		{"defaults", &sundialv1.Topic{Name: "t"}, nil},
		{"full", &sundialv1.Topic{Name: "t", Kind: sundialv1.TopicKind_TOPIC_KIND_FAIR, Partitions: MaxPartitions, VisibilityTimeoutMs: 1000,
			MaxAttempts: 1, RetentionMs: 1, MaxMessageBytes: 1000, DedupWindowMs: 1, Groups: []string{"a", "b"},
			ReleaseRatePerSec: MaxReleaseRatePerSec, JitterMs: MaxJitter.Milliseconds(), BackoffBaseMs: 5, BackoffMaxMs: 5,
			FairnessWeights: map[string]int32{"x": 1}}, nil},
		{"nil", nil, []string{"topic"}},
		{"no name", &sundialv1.Topic{}, []string{"topic.name"}},
		{"dead-letter name", &sundialv1.Topic{Name: "t.dlq"}, []string{"topic.name"}},
		{"unknown kind", &sundialv1.Topic{Name: "t", Kind: 7}, []string{"topic.kind"}},
		{"too many partitions", &sundialv1.Topic{Name: "t", Partitions: MaxPartitions + 1}, []string{"topic.partitions"}},
		{"negative partitions", &sundialv1.Topic{Name: "t", Partitions: -1}, []string{"topic.partitions"}},
		{"visibility too short", &sundialv1.Topic{Name: "t", VisibilityTimeoutMs: 999}, []string{"topic.visibility_timeout_ms"}},
		{"visibility too long", &sundialv1.Topic{Name: "t", VisibilityTimeoutMs: MaxVisibilityTimeout.Milliseconds() + 1}, []string{"topic.visibility_timeout_ms"}},
		{"negative attempts", &sundialv1.Topic{Name: "t", MaxAttempts: -1}, []string{"topic.max_attempts"}},
		{"negative retention", &sundialv1.Topic{Name: "t", RetentionMs: -1}, []string{"topic.retention_ms"}},
		{"negative dedup window", &sundialv1.Topic{Name: "t", DedupWindowMs: -1}, []string{"topic.dedup_window_ms"}},
		{"message size beyond the cluster's", &sundialv1.Topic{Name: "t", MaxMessageBytes: 1001}, []string{"topic.max_message_bytes"}},
		{"negative message size", &sundialv1.Topic{Name: "t", MaxMessageBytes: -1}, []string{"topic.max_message_bytes"}},
		{"bad group", &sundialv1.Topic{Name: "t", Groups: []string{"ok", "a b"}}, []string{"topic.groups[1]"}},
		{"release rate", &sundialv1.Topic{Name: "t", ReleaseRatePerSec: MaxReleaseRatePerSec + 1}, []string{"topic.release_rate_per_sec"}},
		{"negative release rate", &sundialv1.Topic{Name: "t", ReleaseRatePerSec: -1}, []string{"topic.release_rate_per_sec"}},
		{"jitter", &sundialv1.Topic{Name: "t", JitterMs: MaxJitter.Milliseconds() + 1}, []string{"topic.jitter_ms"}},
		{"backoff base above max", &sundialv1.Topic{Name: "t", BackoffBaseMs: 6, BackoffMaxMs: 5}, []string{"topic.backoff_base_ms"}},
		{"backoff base without max", &sundialv1.Topic{Name: "t", BackoffBaseMs: 6}, nil},
		{"negative backoff max", &sundialv1.Topic{Name: "t", BackoffMaxMs: -1}, []string{"topic.backoff_max_ms"}},
		{"weights", &sundialv1.Topic{Name: "t", FairnessWeights: map[string]int32{"b": 0, "a": -1, "c": 2}},
			[]string{"topic.fairness_weights[a]", "topic.fairness_weights[b]"}},
		{"several at once", &sundialv1.Topic{Name: "t", Partitions: -1, JitterMs: -1}, []string{"topic.partitions", "topic.jitter_ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CreateTopic(tc.in, lim)
			if !sameFields(got, tc.want) {
				t.Errorf("CreateTopic(%v) = %v, want fields %v", tc.in, got, tc.want)
			}
		})
	}
}

func TestTopicSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*sundialv1.Topic)
		want   []string
	}{
		{"as stored", func(*sundialv1.Topic) {}, nil},
		{"dead-letter topics may be updated", func(t *sundialv1.Topic) { t.Name = "orders.dlq" }, nil},
		{"zero visibility is no default here", func(t *sundialv1.Topic) { t.VisibilityTimeoutMs = 0 }, []string{"topic.visibility_timeout_ms"}},
		{"zero attempts", func(t *sundialv1.Topic) { t.MaxAttempts = 0 }, []string{"topic.max_attempts"}},
		{"zero message size", func(t *sundialv1.Topic) { t.MaxMessageBytes = 0 }, []string{"topic.max_message_bytes"}},
		{"message size beyond the cluster's", func(t *sundialv1.Topic) { t.MaxMessageBytes = 1<<20 + 1 }, []string{"topic.max_message_bytes"}},
		{"zero retention keeps until completed", func(t *sundialv1.Topic) { t.RetentionMs = 0 }, nil},
		{"negative dedup window", func(t *sundialv1.Topic) { t.DedupWindowMs = -1 }, []string{"topic.dedup_window_ms"}},
		{"zero partitions", func(t *sundialv1.Topic) { t.Partitions = 0 }, []string{"topic.partitions"}},
		{"weights", func(t *sundialv1.Topic) { t.FairnessWeights = map[string]int32{"k": 0} }, []string{"topic.fairness_weights[k]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := stored()
			tc.change(in)
			got := TopicSettings(in, DefaultLimits())
			if !sameFields(got, tc.want) {
				t.Errorf("TopicSettings(%v) = %v, want fields %v", in, got, tc.want)
			}
		})
	}
	if got := TopicSettings(nil, DefaultLimits()); !sameFields(got, []string{"topic"}) {
		t.Errorf("TopicSettings(nil) = %v, want fields [topic]", got)
	}
}

func TestListTopics(t *testing.T) {
	for _, tc := range []struct {
		size int32
		want []string
	}{{0, nil}, {MaxPageSize, nil}, {MaxPageSize + 1, []string{"page_size"}}, {-1, []string{"page_size"}}} {
		if got := ListTopics(&sundialv1.ListTopicsRequest{PageSize: tc.size}); !sameFields(got, tc.want) {
			t.Errorf("ListTopics(page_size %d) = %v, want fields %v", tc.size, got, tc.want)
		}
	}
}

func TestExtendMs(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want []string
	}{{0, nil}, {MaxExtend.Milliseconds(), nil}, {MaxExtend.Milliseconds() + 1, []string{"extend_ms"}}, {-1, []string{"extend_ms"}}} {
		got := ExtendMs("extend_ms", tc.ms)
		if !sameFields(got, tc.want) {
			t.Errorf("ExtendMs(%d) = %v, want fields %v", tc.ms, got, tc.want)
		}
		if len(got) > 0 && !strings.Contains(got[0].Description, "12h") {
			t.Errorf("ExtendMs(%d) description %q does not name the bound", tc.ms, got[0].Description)
		}
	}
}

func TestNackDelayMs(t *testing.T) {
	lim := Limits{MaxDelay: time.Hour}
	for _, tc := range []struct {
		ms   int64
		want []string
	}{{0, nil}, {time.Hour.Milliseconds(), nil}, {time.Hour.Milliseconds() + 1, []string{"delay_ms"}}, {-1, []string{"delay_ms"}}} {
		if got := NackDelayMs("delay_ms", tc.ms, lim); !sameFields(got, tc.want) {
			t.Errorf("NackDelayMs(%d) = %v, want fields %v", tc.ms, got, tc.want)
		}
	}
}
