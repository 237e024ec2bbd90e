package service

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"slices"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
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
	d := digester{h: sha256.New()}
	d.uint(uint64(len(msgs)))
	for _, pm := range msgs {
		m := pm.GetMessage()
		d.bytes([]byte(m.GetTopic()))
		d.bytes([]byte(m.GetKey()))
		d.bytes([]byte(m.GetFairnessKey()))
		d.bytes(m.GetPayload())
		names := make([]string, 0, len(m.GetHeaders()))
		for k := range m.GetHeaders() {
			names = append(names, k)
		}
		slices.Sort(names)
		d.uint(uint64(len(names)))
		for _, k := range names {
			d.bytes([]byte(k))
			d.bytes([]byte(m.GetHeaders()[k]))
		}
		d.int(m.GetDelayMs())
		d.int(m.GetDeliverAtUnixMs())
		d.int(m.GetTtlMs())
		d.int(int64(m.GetPriority()))
		d.int(int64(m.GetOnKeyConflict()))
		d.int(m.GetMaxWaitMs())
	}
	return d.h.Sum(nil)
}

// digester writes varints and length-prefixed bytes to a hash; payloads
// go to the hash where they lie, uncopied.
type digester struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (d *digester) uint(v uint64) { _, _ = d.h.Write(binary.AppendUvarint(d.buf[:0], v)) }

func (d *digester) int(v int64) { _, _ = d.h.Write(binary.AppendVarint(d.buf[:0], v)) }

func (d *digester) bytes(b []byte) {
	d.uint(uint64(len(b)))
	_, _ = d.h.Write(b)
}
