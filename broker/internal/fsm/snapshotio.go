package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// maxChunkBytes bounds one key or value read from a snapshot stream.
const maxChunkBytes = 64 << 20

func byteReader(r io.Reader) *bufio.Reader {
	if br, ok := r.(*bufio.Reader); ok {
		return br
	}
	return bufio.NewReaderSize(r, 256<<10)
}

// readChunk reads one length-prefixed key or value into buf's storage
// (grown if needed) and returns it; it is valid until buf is reused.
func readChunk(br *bufio.Reader, buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if n > maxChunkBytes {
		return nil, fmt.Errorf("chunk of %d bytes", n)
	}
	b := slices.Grow(buf[:0], int(n))[:n]
	if _, err := io.ReadFull(br, b); err != nil {
		return nil, io.ErrUnexpectedEOF
	}
	return b, nil
}

// StateHash is a SHA-256 over every key and value of shard in db: equal
// hashes mean equal state.
func StateHash(db *pebble.DB, shard uint64) ([]byte, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: keys.ShardPrefix(shard), UpperBound: keys.ShardEnd(shard)})
	if err != nil {
		return nil, err
	}
	defer it.Close()
	h := sha256.New()
	var lens [16]byte
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return nil, err
		}
		binary.BigEndian.PutUint64(lens[0:8], uint64(len(it.Key())))
		binary.BigEndian.PutUint64(lens[8:16], uint64(len(v)))
		h.Write(lens[:])
		h.Write(it.Key())
		h.Write(v)
	}
	return h.Sum(nil), it.Error()
}
