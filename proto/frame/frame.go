// Package frame packs deliveries into Subscribe response frames and
// unpacks them, the same way on every hop (broker → proxy → client).
//
// A stream whose Start asked for max_deliveries_per_frame above 1 may get
// a Deliveries frame holding several deliveries that were ready together;
// any other stream gets one Delivery frame per delivery, as before the
// option existed. Packing never waits: it only groups what the caller
// already holds. A frame stays under MaxBytes of estimated size unless one
// delivery alone is bigger, so it stays far below gRPC's 4 MiB default
// receive limit.
//
// The functions are pure and safe for concurrent use.
package frame

import (
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// MaxBytes bounds the estimated size of a Deliveries frame.
const MaxBytes = 1 << 20

// Pack returns the frames that carry ds in order, at most perFrame
// deliveries each (perFrame ≤ 1: one Delivery frame each). A frame that
// would hold a single delivery is a Delivery frame.
func Pack(ds []*sundialv1.Delivery, perFrame int) []*sundialv1.SubscribeResponse {
	if len(ds) == 0 {
		return nil
	}
	if perFrame <= 1 {
		out := make([]*sundialv1.SubscribeResponse, len(ds))
		for i, d := range ds {
			out[i] = single(d)
		}
		return out
	}
	var out []*sundialv1.SubscribeResponse
	for len(ds) > 0 {
		n, size := 1, Size(ds[0])
		for n < len(ds) && n < perFrame {
			s := Size(ds[n])
			if size+s > MaxBytes {
				break
			}
			size += s
			n++
		}
		if n == 1 {
			out = append(out, single(ds[0]))
		} else {
			out = append(out, &sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Deliveries{
				Deliveries: &sundialv1.Deliveries{Deliveries: ds[:n:n]},
			}})
		}
		ds = ds[n:]
	}
	return out
}

// Deliveries returns the deliveries resp carries: one for a Delivery
// frame, every one of a Deliveries frame, none for any other frame.
func Deliveries(resp *sundialv1.SubscribeResponse) []*sundialv1.Delivery {
	switch k := resp.GetKind().(type) {
	case *sundialv1.SubscribeResponse_Delivery:
		if k.Delivery == nil {
			return nil
		}
		return []*sundialv1.Delivery{k.Delivery}
	case *sundialv1.SubscribeResponse_Deliveries:
		return k.Deliveries.GetDeliveries()
	}
	return nil
}

// Size estimates the encoded size of d in bytes: its payload, headers and
// strings plus a fixed allowance for tags, lengths and integers. It is
// cheaper than proto.Size and never far below it.
func Size(d *sundialv1.Delivery) int {
	n := 64 + len(d.GetPayload()) + len(d.GetMessageId()) + len(d.GetReceipt()) + len(d.GetTopic()) +
		len(d.GetFairnessKey()) + len(d.GetKey()) + len(d.GetGroup())
	for k, v := range d.GetHeaders() {
		n += len(k) + len(v) + 8
	}
	return n
}

func single(d *sundialv1.Delivery) *sundialv1.SubscribeResponse {
	return &sundialv1.SubscribeResponse{Kind: &sundialv1.SubscribeResponse_Delivery{Delivery: d}}
}
