package frame

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func deliveries(n, payloadBytes int) []*sundialv1.Delivery {
	out := make([]*sundialv1.Delivery, n)
	for i := range out {
		out[i] = &sundialv1.Delivery{MessageId: fmt.Sprintf("m%d", i), Receipt: "r", Payload: bytes.Repeat([]byte{'x'}, payloadBytes)}
	}
	return out
}

// shape is the number of deliveries in each frame, negative for a
// Delivery frame (-1) so single frames and one-element batches differ.
func shape(frames []*sundialv1.SubscribeResponse) []int {
	var out []int
	for _, f := range frames {
		if f.GetDelivery() != nil {
			out = append(out, -1)
			continue
		}
		out = append(out, len(f.GetDeliveries().GetDeliveries()))
	}
	return out
}

func TestPack(t *testing.T) {
	big := MaxBytes / 3 // three of these do not fit one frame
	tests := []struct {
		name     string
		ds       []*sundialv1.Delivery
		perFrame int
		want     []int
	}{
		{"none", nil, 10, nil},
		{"old stream gets singles", deliveries(3, 10), 0, []int{-1, -1, -1}},
		{"per frame 1 gets singles", deliveries(3, 10), 1, []int{-1, -1, -1}},
		{"one delivery is a delivery frame", deliveries(1, 10), 10, []int{-1}},
		{"all in one frame", deliveries(5, 10), 10, []int{5}},
		{"split by count", deliveries(5, 10), 2, []int{2, 2, -1}},
		{"split by bytes", deliveries(5, big), 10, []int{2, 2, -1}},
		{"one over the bytes goes alone", deliveries(2, MaxBytes+1), 10, []int{-1, -1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			frames := Pack(tc.ds, tc.perFrame)
			if got := shape(frames); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Pack(%d deliveries, %d) = frames %v, want %v", len(tc.ds), tc.perFrame, got, tc.want)
			}
			var order []*sundialv1.Delivery
			for _, f := range frames {
				order = append(order, Deliveries(f)...)
			}
			if len(order) != len(tc.ds) {
				t.Fatalf("frames carry %d deliveries, want %d", len(order), len(tc.ds))
			}
			for i := range order {
				if order[i] != tc.ds[i] {
					t.Fatalf("delivery %d is %s, want %s (order kept)", i, order[i].GetMessageId(), tc.ds[i].GetMessageId())
				}
			}
		})
	}
}

func TestPackedFrameStaysUnderGRPCLimit(t *testing.T) {
	ds := deliveries(1000, 4000)
	for _, f := range Pack(ds, 1000) {
		if n := proto.Size(f); n > MaxBytes+8 {
			t.Fatalf("frame of %d deliveries encodes to %d bytes, want at most %d", len(Deliveries(f)), n, MaxBytes+8)
		}
	}
}

func TestSizeNotBelowEncodedSize(t *testing.T) {
	d := &sundialv1.Delivery{
		MessageId: "0123456789abcdef0123456789abcdef", Receipt: "receipt-receipt-receipt-receipt-receipt",
		Topic: "orders", Payload: make([]byte, 300), Headers: map[string]string{"a": "1", "trace": "xyz"},
		Attempt: 1 << 30, PublishedAtUnixMs: 1 << 62, DueAtUnixMs: 1 << 62, FairnessKey: "tenant",
		Key: "k", Group: "default", LeaseDeadlineUnixMs: 1 << 62,
	}
	if got, enc := Size(d), proto.Size(d); got < enc {
		t.Fatalf("Size = %d, below the encoded %d", got, enc)
	}
}

func TestDeliveriesOfOtherFrames(t *testing.T) {
	for _, f := range []*sundialv1.SubscribeResponse{
		nil,
		{},
		{Kind: &sundialv1.SubscribeResponse_AckResult{AckResult: &sundialv1.AckResult{}}},
		{Kind: &sundialv1.SubscribeResponse_CreditReturned{CreditReturned: &sundialv1.Credit{N: 3}}},
		{Kind: &sundialv1.SubscribeResponse_Delivery{}},
	} {
		if got := Deliveries(f); len(got) != 0 {
			t.Errorf("Deliveries(%v) = %d deliveries, want none", f, len(got))
		}
	}
}
