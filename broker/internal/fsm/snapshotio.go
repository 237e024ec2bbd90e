package fsm

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/keys"
)

// maxChunkBytes bounds one key or value read from a snapshot stream.
const maxChunkBytes = 64 << 20

// A snapshot stream is a header, then the shard's key range as
// length-prefixed pairs (uvarint length, bytes; key then value). The header
// is a pair whose key is empty, which no shard key is, and whose value is
// keys.FormatVersion (4 bytes, big-endian). A stream from a broker that
// predates the header starts with a shard key (or is empty): format 1.

// SnapshotFormatError refuses a snapshot whose format this broker cannot
// read.
type SnapshotFormatError struct {
	Shard uint64
	// Found is the snapshot's format version; Known is this binary's
	// (keys.FormatVersion).
	Found, Known uint32
}

func (e *SnapshotFormatError) Error() string {
	if e.Found > e.Known {
		return fmt.Sprintf("fsm: snapshot of shard %d is in state format %d, newer than format %d of this sundial-broker: "+
			"upgrade this broker to the release of the other replicas", e.Shard, e.Found, e.Known)
	}
	return fmt.Sprintf("fsm: snapshot of shard %d is in state format %d, older than format %d of this sundial-broker, which has no migration for it: "+
		"upgrade the other replicas' brokers first", e.Shard, e.Found, e.Known)
}

// appendSnapshotHeader appends the header of a snapshot in this binary's
// format.
func appendSnapshotHeader(buf []byte) []byte {
	buf = binary.AppendUvarint(buf, 0)
	buf = binary.AppendUvarint(buf, 4)
	return binary.BigEndian.AppendUint32(buf, keys.FormatVersion)
}

// readSnapshotFormat consumes the header of a snapshot stream, if it has
// one, and returns its format version (1 for a stream without a header).
func readSnapshotFormat(br *bufio.Reader) (uint32, error) {
	first, err := br.Peek(1)
	if errors.Is(err, io.EOF) || (err == nil && first[0] != 0) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	if _, err := br.ReadByte(); err != nil { // the empty key
		return 0, err
	}
	v, err := readChunk(br, nil)
	if err != nil {
		return 0, err
	}
	if len(v) != 4 {
		return 0, fmt.Errorf("format version of %d bytes", len(v))
	}
	return binary.BigEndian.Uint32(v), nil
}

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
