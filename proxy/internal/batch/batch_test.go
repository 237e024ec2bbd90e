package batch

import (
	"fmt"
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
	// s0 is the shard of request "r"'s first unkeyed "wide" message; the
	// others follow round robin.
	s0 := uint64(Partition("r", "wide", "", 0, 4))
	sh := func(k uint64) uint64 { return 100 + (s0+k)%4 }
	tests := []struct {
		name string
		in   []*sundialv1.Message
		want []uint64 // shard of each request position
	}{
		{"unknown topic is one partition", msgs("a", "b", "c"), []uint64{100, 100, 100}},
		{"round robin without key", msgs("wide", "wide", "wide", "wide", "wide"), []uint64{sh(0), sh(1), sh(2), sh(3), sh(0)}},
		{"keyed messages do not advance the round robin", msgs("wide", "wide k1", "wide"), []uint64{sh(0), 100 + uint64(Partition("r", "wide", "k1", 0, 4)), sh(1)}},
		{"mixed topics keep order", msgs("a", "wide", "b", "wide"), []uint64{100, sh(0), 100, sh(1)}},
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
		seen[Partition("r", "wide", fmt.Sprintf("key-%d", i), 0, 16)] = true
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
		seen[Partition(fmt.Sprint("req-", i), "wide", "", 0, 8)]++
	}
	for p := range uint32(8) {
		if seen[p] < 20 {
			t.Errorf("400 one-message requests put %d on partition %d of 8, want at least 20 (%v)", seen[p], p, seen)
		}
	}
}

func TestMerge(t *testing.T) {
	loc := fakeLocator{"wide": 3}
	in := msgs("wide", "wide", "wide", "wide", "wide", "wide")
	// Request "m0" starts its round robin at partition 0 of 3.
	if p := Partition("m0", "wide", "", 0, 3); p != 0 {
		t.Fatalf("Partition(m, wide, 0) = %d, want 0: pick another request id for this test", p)
	}
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
