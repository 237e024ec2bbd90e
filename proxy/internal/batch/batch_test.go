package batch

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeLocator puts partition p of any topic on shard 100+p.
type fakeLocator map[string]uint32

func (f fakeLocator) Partitions(topic string) uint32 {
	if n, ok := f[topic]; ok {
		return n
	}
	return 1
}

func (fakeLocator) Locate(_ string, p uint32) uint64 { return 100 + uint64(p) }

func (f fakeLocator) LocateKey(topic string, p uint32) uint64 { return f.Locate(topic, p) }

func msgs(specs ...string) []*sundialv1.Message {
	var out []*sundialv1.Message
	for _, s := range specs {
		topic, key, _ := strings.Cut(s, " ") // "topic" or "topic key"
		out = append(out, &sundialv1.Message{Topic: topic, Key: key, Payload: []byte(s)})
	}
	return out
}

func TestSplit(t *testing.T) {
	loc := fakeLocator{"wide": 4}
	// s0 is the shard of request "r"'s unkeyed "wide" messages: fewer than
	// MinPartMessages stay together.
	s0 := uint64(Partition("r", "wide", "", 0, 1, 4))
	sh := func(k uint64) uint64 { return 100 + (s0+k)%4 }
	tests := []struct {
		name string
		in   []*sundialv1.Message
		want []uint64 // shard of each request position
	}{
		{"unknown topic is one partition", msgs("a", "b", "c"), []uint64{100, 100, 100}},
		{"a small batch without key stays together", msgs("wide", "wide", "wide", "wide", "wide"), []uint64{sh(0), sh(0), sh(0), sh(0), sh(0)}},
		{"keyed messages go by key", msgs("wide", "wide k1", "wide"), []uint64{sh(0), 100 + uint64(Partition("r", "wide", "k1", 0, 0, 4)), sh(0)}},
		{"mixed topics keep order", msgs("a", "wide", "b", "wide"), []uint64{100, sh(0), 100, sh(0)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			parts := Split("r", tc.in, loc)
			got := make([]uint64, len(tc.in))
			for i, p := range parts {
				if i > 0 && parts[i-1].Shard >= p.Shard {
					t.Errorf("Split parts not in ascending shard order: %d then %d", parts[i-1].Shard, p.Shard)
				}
				for j, idx := range p.Indices {
					if j > 0 && p.Indices[j-1] >= idx {
						t.Errorf("part %d does not keep request order: %v", p.Shard, p.Indices)
					}
					got[idx] = p.Shard
					if p.Messages[j].GetMessage() != tc.in[idx] {
						t.Errorf("part %d message %d is not request message %d", p.Shard, j, idx)
					}
					if want := uint32(p.Shard - 100); p.Messages[j].GetPartition() != want {
						t.Errorf("part %d message %d partition = %d, want %d", p.Shard, j, p.Messages[j].GetPartition(), want)
					}
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Split(%s) shards = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

func TestSplitKeyIsStable(t *testing.T) {
	loc := fakeLocator{"wide": 16}
	first := Split("a", msgs("wide k1"), loc)[0].Shard
	for i := range 20 {
		got := Split(fmt.Sprint("req-", i), msgs("wide k1", "wide"), loc)
		if got[0].Shard != first && (len(got) < 2 || got[1].Shard != first) {
			t.Fatalf("request %d: key k1 moved off shard %d: %v", i, first, got)
		}
	}
	seen := map[uint32]bool{}
	for i := range 200 {
		seen[Partition("r", "wide", fmt.Sprintf("key-%d", i), 0, 0, 16)] = true
	}
	if len(seen) < 12 {
		t.Errorf("200 keys hit %d of 16 partitions, want at least 12", len(seen))
	}
}

// TestSplitSpreadsSingleMessageRequests: requests of one unkeyed message
// each (the SDK's unbatched publish) must not all land on one partition.
func TestSplitSpreadsSingleMessageRequests(t *testing.T) {
	seen := map[uint32]int{}
	for i := range 400 {
		seen[Partition(fmt.Sprint("req-", i), "wide", "", 0, 1, 8)]++
	}
	for p := range uint32(8) {
		if seen[p] < 20 {
			t.Errorf("400 one-message requests put %d on partition %d of 8, want at least 20 (%v)", seen[p], p, seen)
		}
	}
}

func TestMerge(t *testing.T) {
	loc := fakeLocator{"wide": 3}
	// Keyed messages on partitions 0, 1, 2, 0, 1, 2 of 3.
	var specs []string
	for want, i := uint32(0), 0; len(specs) < 6; i++ {
		if k := fmt.Sprint("k", i); Partition("m0", "wide", k, 0, 0, 3) == want {
			specs = append(specs, "wide "+k)
			want = (want + 1) % 3
		}
	}
	in := msgs(specs...)
	parts := Split("m0", in, loc)
	if len(parts) != 3 {
		t.Fatalf("Split gave %d parts, want 3", len(parts))
	}
	failed := &statuspb.Status{Code: int32(codes.Unavailable), Message: "shard 101 has no reachable leader"}
	tests := []struct {
		name    string
		answers []Answer
		want    []string // per request position: message id or "code:<n>"
	}{
		{
			"all ok",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}, {MessageId: "p0b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p1a"}, {MessageId: "p1b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"p0a", "p1a", "p2a", "p0b", "p1b", "p2b"},
		},
		{
			"one part failed",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}, {MessageId: "p0b"}}},
				{Err: failed},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"p0a", "code:14", "p2a", "p0b", "code:14", "p2b"},
		},
		{
			"short answer",
			[]Answer{
				{Results: []*sundialv1.PublishResult{{MessageId: "p0a"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p1a"}, {MessageId: "p1b"}}},
				{Results: []*sundialv1.PublishResult{{MessageId: "p2a"}, {MessageId: "p2b"}}},
			},
			[]string{"code:13", "p1a", "p2a", "code:13", "p1b", "p2b"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := Merge(len(in), parts, tc.answers)
			got := make([]string, len(res))
			for i, r := range res {
				if r.GetError() != nil {
					got[i] = fmt.Sprintf("code:%d", r.GetError().GetCode())
				} else {
					got[i] = r.GetMessageId()
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("Merge(%s) = %v, want %v", tc.name, got, tc.want)
			}
		})
	}
}

// TestSplitIsSameOnRetry: a retried request (same id, same messages) must
// land each message on the same shard as the first attempt, whatever the
// proxy split in between and whichever proxy serves the retry.
func TestSplitIsSameOnRetry(t *testing.T) {
	loc := fakeLocator{"wide": 4}
	in := msgs("wide", "wide", "wide", "wide", "wide", "wide wk", "wide")
	want := fmt.Sprint(Split("r1", in, loc))
	Split("r2", msgs("wide"), loc) // another request in between
	if got := fmt.Sprint(Split("r1", in, loc)); got != want {
		t.Errorf("Split(retry) = %v, want %v", got, want)
	}
}

// TestSplitKeepsBatchesWhole: a batch of unkeyed messages is cut into parts
// of at least MinPartMessages, so the SDK's 100-message batch on an
// 8-partition topic is one Raft entry on one shard, not eight entries of
// 12 messages that the request waits for the slowest of.
func TestSplitKeepsBatchesWhole(t *testing.T) {
	loc := fakeLocator{"wide": 8}
	many := func(n int) []*sundialv1.Message {
		specs := make([]string, n)
		for i := range specs {
			specs[i] = "wide"
		}
		return msgs(specs...)
	}
	for _, tc := range []struct {
		n, wantParts int
	}{{1, 1}, {100, 1}, {199, 1}, {250, 2}, {800, 8}, {5000, 8}} {
		parts := Split("r", many(tc.n), loc)
		if len(parts) != tc.wantParts {
			t.Errorf("Split(%d unkeyed messages, 8 partitions) = %d parts, want %d", tc.n, len(parts), tc.wantParts)
			continue
		}
		for _, p := range parts {
			if tc.wantParts > 1 && len(p.Messages) < MinPartMessages {
				t.Errorf("Split(%d) part on shard %d has %d messages, want at least %d", tc.n, p.Shard, len(p.Messages), MinPartMessages)
			}
		}
	}
	// Requests spread over the partitions by their start: 400 requests of
	// 100 messages use every partition.
	seen := map[uint64]int{}
	for i := range 400 {
		for _, p := range Split(fmt.Sprint("req-", i), many(100), loc) {
			seen[p.Shard]++
		}
	}
	for p := range uint64(8) {
		if seen[100+p] < 20 {
			t.Errorf("400 100-message requests used shard %d %d times, want at least 20 (%v)", 100+p, seen[100+p], seen)
		}
	}
}

// The partitions of a request's messages do not depend on where the
// partitions live: a retry after shards were added splits into the same
// partitions as the first attempt (an earlier split that started unkeyed
// runs on the request id's home shard, a ring position, sent retries to
// other shards after the ring changed: new messages for one request id).
func TestSplitPartitionsIgnoreShardPlacement(t *testing.T) {
	partitions := func(parts []Part) map[int]uint32 {
		out := map[int]uint32{}
		for _, p := range parts {
			for j, i := range p.Indices {
				out[i] = p.Messages[j].GetPartition()
			}
		}
		return out
	}
	for i := range 20 {
		rid := fmt.Sprint("r", i)
		batch := msgs("wide", "wide", "wide k1", "wide")
		before := partitions(Split(rid, batch, fakeLocator{"wide": 8}))
		after := partitions(Split(rid, batch, movedLocator{fakeLocator{"wide": 8}}))
		if !maps.Equal(before, after) {
			t.Fatalf("Split(%s) partitions = %v with one placement, %v with another, want the same", rid, before, after)
		}
	}
}

// movedLocator is fakeLocator with the partitions on other shards.
type movedLocator struct{ fakeLocator }

func (m movedLocator) Locate(topic string, p uint32) uint64 { return 200 + uint64(p)%3 }

func (m movedLocator) LocateKey(topic string, p uint32) uint64 { return m.Locate(topic, p) }
