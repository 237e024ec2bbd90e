package receipt

import (
	"bytes"
	"errors"
	"testing"
)

func keys(live map[uint32][]byte) func(uint32) []byte {
	return func(id uint32) []byte { return live[id] }
}

func TestSignVerify(t *testing.T) {
	k1, k2 := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	plain := Receipt{Message: NewMessageID(100, 7, 1), Group: "g", Attempt: 3}.String()
	signed, err := Sign(plain, "orders", 1, k1)
	if err != nil {
		t.Fatal(err)
	}
	got, topic, err := Verify(signed, keys(map[uint32][]byte{1: k1, 2: k2}))
	if err != nil || got != plain || topic != "orders" {
		t.Fatalf("Verify(Sign) = %q, %q, %v; want %q, orders", got, topic, err, plain)
	}
	if _, _, err := Verify(signed, keys(map[uint32][]byte{2: k2})); !errors.Is(err, ErrBadMAC) {
		t.Errorf("Verify with key 1 dropped = %v, want ErrBadMAC", err)
	}
	if _, _, err := Verify(plain, keys(map[uint32][]byte{1: k1})); !errors.Is(err, ErrMalformed) {
		t.Errorf("Verify(plain receipt) = %v, want ErrMalformed", err)
	}
	// Every single-byte change of the signed bytes is refused.
	raw := []byte(signed)
	for i := range raw {
		alt := bytes.Clone(raw)
		alt[i] ^= 0x01
		if p, _, err := Verify(string(alt), keys(map[uint32][]byte{1: k1})); err == nil {
			t.Fatalf("Verify(receipt altered at %d) = %q, want an error", i, p)
		}
	}
	// A receipt signed for another topic cannot be relabelled.
	other, _ := Sign(plain, "payments", 1, k1)
	if other == signed {
		t.Fatal("receipts of two topics are equal")
	}
}

func FuzzVerify(f *testing.F) {
	k := bytes.Repeat([]byte{7}, 32)
	plain := Receipt{Message: NewMessageID(100, 7, 1), Group: "g", Attempt: 3}.String()
	s, _ := Sign(plain, "t", 1, k)
	f.Add(s)
	f.Add(plain)
	f.Add("")
	f.Fuzz(func(t *testing.T, in string) {
		p, topic, err := Verify(in, keys(map[uint32][]byte{1: k}))
		if err != nil {
			return
		}
		again, err := Sign(p, topic, 1, k)
		if err != nil {
			t.Fatalf("Sign(Verify(%q)) = %v", in, err)
		}
		if p2, t2, err := Verify(again, keys(map[uint32][]byte{1: k})); err != nil || p2 != p || t2 != topic {
			t.Fatalf("round trip of %q = %q, %q, %v", in, p2, t2, err)
		}
	})
}
