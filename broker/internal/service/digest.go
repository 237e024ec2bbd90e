package service

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"io"
	"slices"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// publishDigest is the SHA-256 of a shard publish's messages as the client
// sent them: their count, then per message its topic, key, fairness key,
// payload, headers in key order, delay, deliver-at, TTL, priority,
// on-conflict and max-wait, each length-prefixed or varint-encoded so no
// two different batches encode alike. It leaves out what the proxy or the
// broker decides (the partition, publish and due times, jitter), so every
// attempt of one request digests the same. The fsm keeps it in the
// request's dedup record and refuses a request id reused for other
// messages. A field added to sundialv1.Message must be added here
// (TestPublishDigestCoversEveryField fails until it is).
func publishDigest(msgs []*brokerv1.PartitionedMessage) []byte {
	d := digester{h: sha256.New(), buf: make([]byte, 0, digestBufBytes)}
	d.uint(uint64(len(msgs)))
	var names []string
	for _, pm := range msgs {
		m := pm.GetMessage()
		d.string(m.GetTopic())
		d.string(m.GetKey())
		d.string(m.GetFairnessKey())
		// text is the plain-text form of payload (the proxy folds it in):
		// digested as the payload it stands for.
		if t := m.GetText(); t != "" {
			d.string(t)
		} else {
			d.bytes(m.GetPayload())
		}
		names = names[:0]
		for k := range m.GetHeaders() {
			names = append(names, k)
		}
		slices.Sort(names)
		d.uint(uint64(len(names)))
		for _, k := range names {
			d.string(k)
			d.string(m.GetHeaders()[k])
		}
		d.int(m.GetDelayMs())
		d.int(m.GetDeliverAtUnixMs())
		d.int(m.GetTtlMs())
		d.int(int64(m.GetPriority()))
		d.int(int64(m.GetOnKeyConflict()))
		d.int(m.GetMaxWaitMs())
	}
	d.flush()
	return d.h.Sum(nil)
}

// changeDigest is the SHA-256 of what a cancel or reschedule names as the
// client sent it: the kind, the topic, the key or message id, and for a
// reschedule delay_ms and deliver_at_unix_ms (not the due time the broker
// computes from them, so every attempt digests the same). The fsm keeps it
// in the request's dedup record and refuses a request id reused for
// another change. A field added to ShardChangeRequest that changes what
// the request does must be added here.
func changeDigest(req *brokerv1.ShardChangeRequest, cancel bool) []byte {
	d := digester{h: sha256.New()}
	const kindCancel, kindReschedule, byKey, byID = 1, 2, 1, 2
	if cancel {
		d.uint(kindCancel)
	} else {
		d.uint(kindReschedule)
	}
	sel := req.GetMessage()
	d.string(sel.GetTopic())
	switch by := sel.GetBy().(type) {
	case *sundialv1.MessageSelector_Key:
		d.uint(byKey)
		d.string(by.Key)
	case *sundialv1.MessageSelector_MessageId:
		d.uint(byID)
		d.string(by.MessageId)
	default:
		d.uint(0)
	}
	if !cancel {
		d.int(req.GetDelayMs())
		d.int(req.GetDeliverAtUnixMs())
	}
	d.flush()
	return d.h.Sum(nil)
}

// digester feeds a hash: small fields gather in buf, payloads go to the
// hash where they lie, uncopied.
type digester struct {
	h   hash.Hash
	buf []byte
}

func (d *digester) uint(v uint64) { d.buf = binary.AppendUvarint(d.buf, v) }

func (d *digester) int(v int64) { d.buf = binary.AppendVarint(d.buf, v) }

// digestBufBytes bounds the gathered small fields; longer values are
// written to the hash directly.
const digestBufBytes = 4096

func (d *digester) string(s string) {
	d.uint(uint64(len(s)))
	if len(d.buf)+len(s) > digestBufBytes {
		d.flush()
	}
	if len(s) > digestBufBytes {
		_, _ = io.WriteString(d.h, s)
		return
	}
	d.buf = append(d.buf, s...)
}

func (d *digester) bytes(b []byte) {
	d.uint(uint64(len(b)))
	if len(d.buf)+len(b) > digestBufBytes {
		d.flush()
	}
	if len(b) > digestBufBytes {
		_, _ = d.h.Write(b)
		return
	}
	d.buf = append(d.buf, b...)
}

func (d *digester) flush() {
	_, _ = d.h.Write(d.buf)
	d.buf = d.buf[:0]
}
