package routing

import (
	"context"
	"errors"
	"testing"
	"time"
)

// fakeMeta answers lookups from a map and counts them.
type fakeMeta struct {
	topics map[string]uint32
	err    error
	calls  int
}

func (f *fakeMeta) lookup(_ context.Context, topic string) (uint32, error) {
	f.calls++
	if f.err != nil {
		return 0, f.err
	}
	n, ok := f.topics[topic]
	if !ok {
		return 0, ErrTopicNotFound
	}
	return n, nil
}

func TestTopicsResolve(t *testing.T) {
	errMeta := errors.New("meta unreachable")
	tests := []struct {
		name      string
		meta      fakeMeta
		topic     string
		want      uint32
		wantErr   error
		wantCalls int
	}{
		{"listed topic needs no lookup", fakeMeta{topics: map[string]uint32{"wide": 99}}, "wide", 16, nil, 0},
		{"unlisted topic asked from meta", fakeMeta{topics: map[string]uint32{"fresh": 8}}, "fresh", 8, nil, 1},
		{"dead letters of an unlisted topic", fakeMeta{topics: map[string]uint32{"fresh": 8}}, "fresh.dlq", 8, nil, 1},
		{"topic meta lacks keeps one partition", fakeMeta{}, "absent", 1, nil, 1},
		{"meta error is returned", fakeMeta{err: errMeta}, "fresh", 0, errMeta, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := NewTopics(tc.meta.lookup)
			got, err := r.Resolve(t.Context(), testTable(4), tc.topic)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Resolve(%q) error = %v, want %v", tc.topic, err, tc.wantErr)
			}
			if err == nil && got.Partitions(tc.topic) != tc.want {
				t.Errorf("Resolve(%q).Partitions() = %d, want %d", tc.topic, got.Partitions(tc.topic), tc.want)
			}
			if tc.meta.calls != tc.wantCalls {
				t.Errorf("Resolve(%q) asked meta %d times, want %d", tc.topic, tc.meta.calls, tc.wantCalls)
			}
		})
	}
}

func TestTopicsRemembersForAWhile(t *testing.T) {
	meta := &fakeMeta{topics: map[string]uint32{"fresh": 8}}
	r := NewTopics(meta.lookup)
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	tab := testTable(4)
	resolve := func() uint32 {
		t.Helper()
		got, err := r.Resolve(t.Context(), tab, "fresh", "fresh")
		if err != nil {
			t.Fatalf("Resolve() error = %v", err)
		}
		return got.Partitions("fresh")
	}
	resolve()
	resolve()
	if meta.calls != 1 {
		t.Fatalf("two resolves within the TTL asked meta %d times, want 1", meta.calls)
	}
	if tab.Partitions("fresh") != 1 {
		t.Fatalf("Resolve changed the table it was given")
	}
	meta.topics["fresh"] = 4
	now = now.Add(learnedTTL)
	if got := resolve(); got != 4 || meta.calls != 2 {
		t.Fatalf("after the TTL: partitions %d, calls %d, want 4 and 2", got, meta.calls)
	}
	r.Forget("fresh.dlq")
	if resolve(); meta.calls != 3 {
		t.Fatalf("after Forget: calls %d, want 3", meta.calls)
	}
}
