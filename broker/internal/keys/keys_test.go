package keys

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

func id(n byte) []byte {
	b := make([]byte, IDBytes)
	b[IDBytes-1] = n
	return b
}

func TestDueRoundTrip(t *testing.T) {
	q := Queue{Topic: "orders", Partition: 3, Group: "billing"}
	tests := []struct {
		name string
		e    DueEntry
	}{
		{"zero", DueEntry{VisibleAtMs: 0, Priority: 0, ID: id(1)}},
		{"negative priority", DueEntry{VisibleAtMs: 1_700_000_000_000, Priority: -5, ID: id(2)}},
		{"max priority", DueEntry{VisibleAtMs: 1 << 50, Priority: 1<<31 - 1, ID: id(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := Due(7, q, tt.e.VisibleAtMs, tt.e.Priority, tt.e.ID)
			got, err := ParseDue(7, q, k)
			if err != nil || got.VisibleAtMs != tt.e.VisibleAtMs || got.Priority != tt.e.Priority || !bytes.Equal(got.ID, tt.e.ID) {
				t.Fatalf("ParseDue(Due(%v)) = %v, %v", tt.e, got, err)
			}
		})
	}
}

func TestDueOrder(t *testing.T) {
	q := Queue{Topic: "t", Group: "default"}
	// Sorted by time, then priority (lower first), then id.
	ordered := [][]byte{
		Due(1, q, 100, -1, id(9)),
		Due(1, q, 100, 0, id(1)),
		Due(1, q, 100, 0, id(2)),
		Due(1, q, 100, 5, id(0)),
		Due(1, q, 101, -100, id(0)),
		Due(1, q, 1<<40, 0, id(0)),
	}
	shuffled := slices.Clone(ordered)
	slices.Reverse(shuffled)
	slices.SortFunc(shuffled, bytes.Compare)
	for i := range ordered {
		if !bytes.Equal(shuffled[i], ordered[i]) {
			t.Fatalf("position %d: sorted keys differ from the expected order", i)
		}
	}
	until := DueUntil(1, q, 100)
	if bytes.Compare(ordered[3], until) >= 0 || bytes.Compare(ordered[4], until) < 0 {
		t.Fatalf("DueUntil(100) does not split the entries at 100 and 101")
	}
}

func TestQueuesAndShardsDoNotOverlap(t *testing.T) {
	a := QueuePrefix(1, Queue{Topic: "a", Group: "g"})
	b := QueuePrefix(1, Queue{Topic: "a", Group: "gg"})
	c := QueuePrefix(1, Queue{Topic: "a.", Group: "g"})
	for _, p := range [][]byte{b, c} {
		if bytes.HasPrefix(p, a) || bytes.HasPrefix(a, p) {
			t.Fatalf("queue prefixes %q and %q overlap", a, p)
		}
	}
	if k := Due(1, Queue{Topic: "a", Group: "g"}, 5, 0, id(1)); bytes.Compare(k, ShardEnd(1)) >= 0 || bytes.Compare(k, ShardPrefix(1)) < 0 {
		t.Fatalf("due key falls outside its shard range")
	}
}

func TestParseDueRejects(t *testing.T) {
	q := Queue{Topic: "t", Group: "default"}
	for _, k := range [][]byte{nil, QueuePrefix(1, q), Due(2, q, 1, 1, id(1)), Due(1, Queue{Topic: "u", Group: "default"}, 1, 1, id(1))} {
		if _, err := ParseDue(1, q, k); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseDue(%q) error = %v, want ErrMalformed", k, err)
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	if got := PrefixEnd([]byte{1, 0xff}); !bytes.Equal(got, []byte{2}) {
		t.Fatalf("PrefixEnd([1 ff]) = %v, want [2]", got)
	}
}

func FuzzParseDue(f *testing.F) {
	q := Queue{Topic: "t", Group: "default"}
	f.Add(Due(1, q, 5, 0, id(1)))
	f.Fuzz(func(t *testing.T, k []byte) {
		e, err := ParseDue(1, q, k)
		if err != nil {
			return
		}
		if !bytes.Equal(Due(1, q, e.VisibleAtMs, e.Priority, e.ID), k) {
			t.Fatalf("re-encoding %v differs from %q", e, k)
		}
	})
}

func BenchmarkDue(b *testing.B) {
	b.ReportAllocs()
	q := Queue{Topic: "orders", Partition: 0, Group: "default"}
	mid := id(7)
	for i := 0; b.Loop(); i++ {
		_ = Due(3, q, int64(i), 0, mid)
	}
}

func TestParseTopicDue(t *testing.T) {
	q := Queue{Topic: "orders", Partition: 7, Group: "billing"}
	k := Due(3, q, 12345, -2, id(9))
	gotQ, e, err := ParseTopicDue(3, "orders", k)
	if err != nil || gotQ != q || e.VisibleAtMs != 12345 || e.Priority != -2 || !bytes.Equal(e.ID, id(9)) {
		t.Fatalf("ParseTopicDue() = %v, %v, %v", gotQ, e, err)
	}
	if _, _, err := ParseTopicDue(3, "orders", QueuePrefix(3, q)); !errors.Is(err, ErrMalformed) {
		t.Fatalf("ParseTopicDue(prefix) error = %v, want ErrMalformed", err)
	}
}

func TestDueValueRoundTrip(t *testing.T) {
	for _, leased := range []bool{false, true} {
		a, l, err := ParseDueValue(DueValue(42, leased))
		if err != nil || a != 42 || l != leased {
			t.Fatalf("ParseDueValue(DueValue(42, %v)) = %d, %v, %v", leased, a, l, err)
		}
	}
}

func TestForgetAndExpiryRoundTrip(t *testing.T) {
	k := Forget(5, 999, ForgetKey, Tail(Key(5, "t", "k1")))
	at, kind, rest, err := ParseForget(k)
	if err != nil || at != 999 || kind != ForgetKey || !bytes.Equal(FromTail(5, TagKey, rest), Key(5, "t", "k1")) {
		t.Fatalf("ParseForget() = %d, %c, %q, %v", at, kind, rest, err)
	}
	at, mid, err := ParseExpiry(Expiry(5, 777, id(3)))
	if err != nil || at != 777 || !bytes.Equal(mid, id(3)) {
		t.Fatalf("ParseExpiry() = %d, %v, %v", at, mid, err)
	}
}

func TestFairRoundTrip(t *testing.T) {
	q := Queue{Topic: "jobs", Partition: 1, Group: "default"}
	for _, fk := range []string{"", "tenant-a", "tenant-a.job-7"} {
		k := Fair(2, q, fk, 55, -1, id(4))
		gotKey, e, err := ParseFair(2, q, k)
		if err != nil || gotKey != fk || e.VisibleAtMs != 55 || e.Priority != -1 || !bytes.Equal(e.ID, id(4)) {
			t.Fatalf("ParseFair(Fair(%q)) = %q, %v, %v", fk, gotKey, e, err)
		}
		if !bytes.HasPrefix(k, FairKeyPrefix(2, q, fk)) {
			t.Fatalf("Fair(%q) lacks its key prefix", fk)
		}
	}
}
