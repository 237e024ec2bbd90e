package fanout

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func TestSplit(t *testing.T) {
	shards := []uint64{1, 2, 3, 4}
	for _, tc := range []struct {
		name   string
		total  int64
		offset int
		want   []Share
	}{
		{"even", 8, 0, []Share{{1, 2}, {2, 2}, {3, 2}, {4, 2}}},
		{"remainder from offset", 10, 1, []Share{{1, 2}, {2, 3}, {3, 3}, {4, 2}}},
		{"remainder wraps", 10, 3, []Share{{1, 3}, {2, 2}, {3, 2}, {4, 3}}},
		{"fewer than shards", 1, 2, []Share{{3, 1}}},
		{"two of four", 2, 3, []Share{{1, 1}, {4, 1}}},
		{"negative offset", 1, -1, []Share{{4, 1}}},
		{"zero", 0, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(tc.total, shards, tc.offset)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Split(%d, %v, %d) = %v, want %v", tc.total, shards, tc.offset, got, tc.want)
			}
		})
	}
	// Never more than the total, whatever the shape.
	for total := int64(1); total <= 25; total++ {
		for n := 1; n <= 7; n++ {
			ids := make([]uint64, n)
			for i := range ids {
				ids[i] = uint64(i + 1)
			}
			var sum int64
			for _, s := range Split(total, ids, int(total)) {
				sum += s.N
			}
			if sum != total {
				t.Fatalf("Split(%d, %d shards) sums to %d, want %d", total, n, sum, total)
			}
		}
	}
}

func TestMergeStats(t *testing.T) {
	a := []*sundialv1.GroupStats{
		{Group: "default", Scheduled: 10, Ready: 2, InFlight: 1, DeadLettered: 3, OldestReadyAgeMs: 50, LatenessP50Ms: 1, LatenessP99Ms: 9},
		{Group: "zeta", Scheduled: 1},
	}
	b := []*sundialv1.GroupStats{
		{Group: "default", Scheduled: 5, Ready: 1, InFlight: 4, DeadLettered: 0, OldestReadyAgeMs: 80, LatenessP50Ms: 2, LatenessP99Ms: 4},
		{Group: "alpha", Ready: 7},
	}
	got := MergeStats([]string{"default", "billing"}, a, b)
	want := []*sundialv1.GroupStats{
		{Group: "default", Scheduled: 15, Ready: 3, InFlight: 5, DeadLettered: 3, OldestReadyAgeMs: 80, LatenessP50Ms: 2, LatenessP99Ms: 9},
		{Group: "billing"},
		{Group: "alpha", Ready: 7},
		{Group: "zeta", Scheduled: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("MergeStats() = %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("MergeStats()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestMergeHistogram(t *testing.T) {
	got := MergeHistogram(
		[]*sundialv1.HistogramCount{{StartUnixMs: 120, Count: 2}, {StartUnixMs: 60, Count: 1}},
		nil,
		[]*sundialv1.HistogramCount{{StartUnixMs: 60, Count: 4}, {StartUnixMs: 0, Count: 0}, {StartUnixMs: 180, Count: 1}},
	)
	want := []*sundialv1.HistogramCount{{StartUnixMs: 60, Count: 5}, {StartUnixMs: 120, Count: 2}, {StartUnixMs: 180, Count: 1}}
	if len(got) != len(want) {
		t.Fatalf("MergeHistogram() = %v, want %v", got, want)
	}
	for i := range want {
		if !proto.Equal(got[i], want[i]) {
			t.Errorf("MergeHistogram()[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestTokenRoundTrip(t *testing.T) {
	in := Token{RoutingVersion: 9, Placement: 1 << 63, Query: 42, After: map[uint64][]byte{3: {0, 0xff, 7}, 12: []byte("c")}, Done: []uint64{1, 5}}
	s := in.Encode()
	out, err := DecodeToken(s)
	if err != nil {
		t.Fatalf("DecodeToken(%q) = %v", s, err)
	}
	if out.RoutingVersion != in.RoutingVersion || out.Placement != in.Placement || out.Query != in.Query || !slices.Equal(out.Done, in.Done) || len(out.After) != 2 || string(out.After[3]) != string(in.After[3]) || string(out.After[12]) != "c" {
		t.Errorf("DecodeToken(Encode(%+v)) = %+v", in, out)
	}
	for _, bad := range []string{"%%%", "bm90IGpzb24"} {
		if _, err := DecodeToken(bad); !errors.Is(err, ErrBadToken) {
			t.Errorf("DecodeToken(%q) = %v, want ErrBadToken", bad, err)
		}
	}
}

func TestQueryHash(t *testing.T) {
	a := &sundialv1.ListMessagesRequest{Topic: "t", KeyPrefix: "ab", PageSize: 5}
	b := &sundialv1.ListMessagesRequest{Topic: "t", KeyPrefix: "ab", PageSize: 50, PageToken: "x"}
	c := &sundialv1.ListMessagesRequest{Topic: "t", KeyPrefix: "a", HeaderKey: "b"}
	if QueryHash(a) != QueryHash(b) {
		t.Error("QueryHash differs by page size/token, want equal")
	}
	if QueryHash(a) == QueryHash(c) {
		t.Error("QueryHash(prefix ab) == QueryHash(prefix a, header b), want different")
	}
}

// shardData is a shard's full listing: message names with their cursors.
type shardData struct {
	id      uint64
	cursors []string
}

// page answers a request for n messages after cursor after, as a shard does.
func (d shardData) page(after []byte, n int) ShardPage {
	p := ShardPage{Shard: d.id, Requested: n}
	for _, c := range d.cursors {
		if after != nil && c <= string(after) {
			continue
		}
		if len(p.Messages) == n {
			break
		}
		p.Messages = append(p.Messages, &sundialv1.MessageInfo{MessageId: fmt.Sprintf("%d/%s", d.id, c)})
		p.Cursors = append(p.Cursors, []byte(c))
	}
	return p
}

func TestMergePagesListsEverythingOnceInOrder(t *testing.T) {
	shards := []shardData{
		{1, []string{"a", "d", "e", "f", "m"}},
		{2, []string{"b", "c", "g"}},
		{3, nil},
		{4, []string{"e", "h", "i", "j", "k", "l"}},
	}
	for _, pageSize := range []int{1, 2, 3, 7, 100} {
		t.Run(fmt.Sprint(pageSize), func(t *testing.T) {
			var got []string
			tok := Token{Placement: 5, Query: 6}
			for round := 0; ; round++ {
				if round > 100 {
					t.Fatal("listing did not end after 100 pages")
				}
				// The token goes through its client-facing form each page.
				tok, _ = DecodeToken(tok.Encode())
				var pages []ShardPage
				for _, d := range shards {
					if !tok.IsDone(d.id) {
						pages = append(pages, d.page(tok.After[d.id], pageSize))
					}
				}
				msgs, next, more, err := MergePages(tok, pages, pageSize)
				if err != nil {
					t.Fatalf("MergePages() = %v", err)
				}
				if len(msgs) > pageSize {
					t.Fatalf("MergePages() gave %d messages, page size %d", len(msgs), pageSize)
				}
				for _, m := range msgs {
					got = append(got, m.GetMessageId())
				}
				if next.Placement != 5 || next.Query != 6 {
					t.Fatalf("next token %+v lost placement or query", next)
				}
				if !more {
					break
				}
				tok = next
			}
			want := []string{"1/a", "2/b", "2/c", "1/d", "1/e", "4/e", "1/f", "2/g", "4/h", "4/i", "4/j", "4/k", "4/l", "1/m"}
			if !slices.Equal(got, want) {
				t.Errorf("pages of %d listed %v, want %v", pageSize, got, want)
			}
		})
	}
}

func TestMergePagesRejectsBadShardAnswers(t *testing.T) {
	short := ShardPage{Shard: 1, Requested: 5, Messages: []*sundialv1.MessageInfo{{}}, Cursors: nil}
	if _, _, _, err := MergePages(Token{}, []ShardPage{short}, 5); !errors.Is(err, ErrShortCursors) {
		t.Errorf("MergePages(short cursors) = %v, want ErrShortCursors", err)
	}
	back := ShardPage{Shard: 1, Requested: 5, Messages: []*sundialv1.MessageInfo{{}, {}}, Cursors: [][]byte{[]byte("b"), []byte("a")}}
	if _, _, _, err := MergePages(Token{}, []ShardPage{back}, 5); !errors.Is(err, ErrCursorsBackward) {
		t.Errorf("MergePages(backward cursors) = %v, want ErrCursorsBackward", err)
	}
}
