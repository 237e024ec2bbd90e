package scenario

import (
	"testing"
	"time"
)

func TestPayloadRoundTrip(t *testing.T) {
	due := time.UnixMicro(1_700_000_000_123_456)
	for _, tc := range []struct {
		name    string
		seq     uint64
		size    int
		wantLen int
	}{
		{"header only", 7, 0, HeaderBytes},
		{"padded", 1 << 40, 100, 100},
		{"size below header", 3, 4, HeaderBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := EncodePayload(tc.seq, due, tc.size)
			if len(b) != tc.wantLen {
				t.Fatalf("len(EncodePayload(%d, %v, %d)) = %d, want %d", tc.seq, due, tc.size, len(b), tc.wantLen)
			}
			seq, got, err := DecodePayload(b)
			if err != nil || seq != tc.seq || !got.Equal(due) {
				t.Fatalf("DecodePayload(EncodePayload(%d)) = %d, %v, %v, want %d, %v, nil", tc.seq, seq, got, err, tc.seq, due)
			}
		})
	}
	if _, _, err := DecodePayload([]byte("short")); err == nil {
		t.Fatalf("DecodePayload(short) = nil error, want an error")
	}
	b := EncodePayload(1, due, 32)
	later := due.Add(time.Second)
	SetDue(b, later)
	if _, got, _ := DecodePayload(b); !got.Equal(later) {
		t.Fatalf("due after SetDue(%v) = %v, want %v", later, got, later)
	}
}

func TestBitset(t *testing.T) {
	b := NewBitset(130)
	for _, tc := range []struct {
		name string
		seq  uint64
		want bool
	}{
		{"first set", 0, true},
		{"again", 0, false},
		{"word boundary", 64, true},
		{"last", 129, true},
		{"out of range", 130, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := b.Set(tc.seq); got != tc.want {
				t.Fatalf("Set(%d) = %v, want %v", tc.seq, got, tc.want)
			}
		})
	}
	if got := b.Count(); got != 3 {
		t.Fatalf("Count() = %d, want 3", got)
	}
	if !b.Has(64) || b.Has(65) {
		t.Fatalf("Has(64), Has(65) = %v, %v, want true, false", b.Has(64), b.Has(65))
	}
}

func TestImpairment(t *testing.T) {
	kill := time.Unix(100, 0)
	at := func(ms int) time.Time { return kill.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name                string
		calls               []call
		wantStall, wantFail time.Duration
	}{
		{"none", nil, 0, 0},
		{"before the kill only", []call{{at(-50), at(-10), false}}, 0, 0},
		{"in flight across the kill counts from the kill", []call{{at(-100), at(400), false}}, 400 * time.Millisecond, 0},
		{"after the kill counts from its start", []call{{at(200), at(500), false}}, 300 * time.Millisecond, 0},
		{"failure end", []call{{at(100), at(150), true}, {at(700), at(710), false}}, 50 * time.Millisecond, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stall, fail := impairment(kill, tc.calls)
			if stall != tc.wantStall || fail != tc.wantFail {
				t.Fatalf("impairment(kill, %d calls) = %v, %v, want %v, %v", len(tc.calls), stall, fail, tc.wantStall, tc.wantFail)
			}
		})
	}
}

func TestReceiver(t *testing.T) {
	r := newReceiver(4)
	r.expect(2)
	now := time.Now()
	due := dueMs(now)
	r.handle(Delivery{Payload: EncodePayload(0, due, 16), Received: due.Add(3 * time.Millisecond)})
	r.handle(Delivery{Payload: EncodePayload(0, due, 16), Received: due.Add(4 * time.Millisecond)})  // duplicate
	r.handle(Delivery{Payload: EncodePayload(99, due, 16), Received: due})                           // foreign
	r.handle(Delivery{Payload: EncodePayload(1, due, 16), Received: due.Add(-2 * time.Millisecond)}) // early
	select {
	case <-r.done:
	default:
		t.Fatalf("receiver not done after 2 of 2 expected deliveries")
	}
	for _, tc := range []struct {
		name      string
		got, want uint64
	}{
		{"got", r.got, 2}, {"dups", r.dups, 1}, {"foreign", r.foreign, 1}, {"early", r.early, 1},
	} {
		if tc.got != tc.want {
			t.Errorf("receiver.%s = %d, want %d", tc.name, tc.got, tc.want)
		}
	}
	if r.earliest != -2*time.Millisecond {
		t.Errorf("receiver.earliest = %v, want -2ms", r.earliest)
	}
}
