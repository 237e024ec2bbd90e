package receipt

import (
	"errors"
	"testing"
)

func TestMessageIDRoundTripAndOrder(t *testing.T) {
	a := NewMessageID(7, 100, 2)
	b := NewMessageID(7, 100, 3)
	c := NewMessageID(7, 101, 0)
	if a.String() >= b.String() || b.String() >= c.String() {
		t.Fatalf("ids do not sort in publish order: %s %s %s", a, b, c)
	}
	got, err := ParseMessageID(a.String())
	if err != nil || got != a {
		t.Fatalf("ParseMessageID(%s) = %v, %v, want %v", a, got, err, a)
	}
	if a.Shard() != 7 {
		t.Fatalf("Shard() = %d, want 7", a.Shard())
	}
}

func TestParseMessageIDRejects(t *testing.T) {
	for _, s := range []string{"", "xyz", "0123456789abcdef0123456789abcdeg", "0123456789abcdef0123456789abcdef00"} {
		if _, err := ParseMessageID(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseMessageID(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func TestReceiptRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		r    Receipt
	}{
		{"default group", Receipt{Message: NewMessageID(1, 5, 0), Group: "default", Attempt: 1}},
		{"large attempt", Receipt{Message: NewMessageID(1<<31, 1<<60, 1<<30), Group: "g.x-y", Attempt: 1 << 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.r.String())
			if err != nil || got != tt.r {
				t.Fatalf("Parse(String(%v)) = %v, %v", tt.r, got, err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	good := Receipt{Message: NewMessageID(1, 5, 0), Group: "default", Attempt: 1}.String()
	for _, s := range []string{"", "!!!", good[:10], "AQ", Receipt{Message: NewMessageID(1, 5, 0), Group: "", Attempt: 1}.String()} {
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) error = %v, want ErrMalformed", s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(Receipt{Message: NewMessageID(1, 5, 0), Group: "default", Attempt: 1}.String())
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s)
		if err != nil {
			return
		}
		again, err := Parse(r.String())
		if err != nil || again != r {
			t.Fatalf("re-parse of %v = %v, %v", r, again, err)
		}
	})
}
