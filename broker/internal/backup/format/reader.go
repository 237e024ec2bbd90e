package format

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

// Reader reads a backup file.
type Reader struct {
	src io.Reader
	// buf[pos:end] is read and not yet consumed; buf[hashed:pos] is
	// consumed and not yet hashed into h.
	buf              []byte
	pos, end, hashed int
	// off is the file offset of buf[0].
	off     int64
	srcErr  error // the error src returned, once it did
	h       hash.Hash
	header  Header
	records uint64
	// key and value hold the record's key and value where buf cannot: a
	// set's key, a key or value over half of buf.
	key, value []byte
	err        error // sticky: io.EOF once the end is read
}

const readBufBytes = 256 << 10

// NewReader reads the magic, version and header of the backup file r
// holds. A file of a newer format is a *VersionError; one that is not a
// backup file wraps ErrCorrupt (or ErrTruncated, if it ends first).
func NewReader(r io.Reader) (*Reader, error) {
	br := &Reader{src: r, buf: make([]byte, readBufBytes), h: sha256.New()}
	magic, err := br.take(len(Magic))
	if errors.Is(err, io.ErrUnexpectedEOF) {
		if got := br.buf[br.pos:br.end]; !bytes.HasPrefix([]byte(Magic), got) {
			return nil, fmt.Errorf("%w: not a Sundial backup file (it is %d bytes long, starting %q)", ErrCorrupt, len(got), got)
		}
	}
	if err != nil {
		return nil, br.fail(err, "magic")
	}
	if string(magic) != Magic {
		return nil, fmt.Errorf("%w: not a Sundial backup file (it starts %q, not %q)", ErrCorrupt, magic, Magic)
	}
	v, err := br.uvarint()
	if err != nil {
		return nil, br.fail(err, "format version")
	}
	switch {
	case v == 0:
		return nil, fmt.Errorf("%w: format version 0", ErrCorrupt)
	case v > FormatVersion:
		return nil, &VersionError{What: "backup file", Found: int(min(v, 1<<31)), Known: FormatVersion}
	}
	n, err := br.uvarint()
	if err != nil {
		return nil, br.fail(err, "header length")
	}
	if n > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header of %d bytes, limit %d", ErrCorrupt, n, MaxHeaderBytes)
	}
	var big []byte
	js, _, err := br.read(int(n), &big)
	if err != nil {
		return nil, br.fail(err, "header")
	}
	if err := json.Unmarshal(js, &br.header); err != nil {
		return nil, fmt.Errorf("%w: header: %w", ErrCorrupt, err)
	}
	if err := br.header.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return br, nil
}

// Header answers the file's header.
func (r *Reader) Header() Header { return r.header }

// Records answers how many records Next has returned.
func (r *Reader) Records() uint64 { return r.records }

// Next answers the next record; its Key and Value are valid until the
// next call. It returns io.EOF only after the end of the file, once its
// record count and checksum matched and nothing followed it.
func (r *Reader) Next() (Record, error) {
	if r.err != nil {
		return Record{}, r.err
	}
	rec, err := r.next()
	if err != nil {
		r.err = err
		return Record{}, err
	}
	r.records++
	return rec, nil
}

func (r *Reader) next() (Record, error) {
	opOff := r.offset()
	b, err := r.take(1)
	if err != nil {
		return Record{}, r.fail(err, "record")
	}
	op := Op(b[0])
	switch op {
	case OpSet, OpDelete:
	case opEnd:
		return Record{}, r.readEnd(opOff)
	default:
		return Record{}, fmt.Errorf("%w: unknown record op 0x%02x at byte %d", ErrCorrupt, b[0], opOff)
	}
	key, inBuf, err := r.chunk(&r.key)
	if err != nil {
		return Record{}, r.fail(err, "key")
	}
	rec := Record{Op: op, Key: key}
	if op == OpSet {
		if inBuf {
			// Reading the value may move buf's bytes: keep the key apart.
			r.key = append(r.key[:0], key...)
			rec.Key = r.key
		}
		if rec.Value, _, err = r.chunk(&r.value); err != nil {
			return Record{}, r.fail(err, "value")
		}
	}
	return rec, nil
}

// readEnd reads the end whose op was at opOff and checks it against what
// was read.
func (r *Reader) readEnd(opOff int64) error {
	// The checksum covers every byte before the end op.
	r.hashTo(r.pos - 1)
	sum := r.h.Sum(nil)
	count, err := r.uvarint()
	if err != nil {
		return r.fail(err, "end")
	}
	want, err := r.take(sha256.Size)
	if err != nil {
		return r.fail(err, "end")
	}
	if count != r.records {
		return fmt.Errorf("%w: the end at byte %d counts %d records, the file holds %d", ErrCorrupt, opOff, count, r.records)
	}
	if !bytes.Equal(sum, want) {
		return fmt.Errorf("%w: checksum mismatch: the bytes before byte %d were altered", ErrCorrupt, opOff)
	}
	if _, err := r.take(1); err == nil {
		return fmt.Errorf("%w: bytes after the end at byte %d", ErrCorrupt, opOff)
	} else if !errors.Is(err, io.ErrUnexpectedEOF) {
		return r.fail(err, "end")
	}
	return io.EOF
}

// fail turns a read error met reading what into the error to return.
func (r *Reader) fail(err error, what string) error {
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: it ends at byte %d, inside the %s", ErrTruncated, r.offset()+int64(r.end-r.pos), what)
	case errors.Is(err, ErrTooLarge):
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, what, err)
	case errors.Is(err, ErrCorrupt):
		return err
	default:
		return fmt.Errorf("format: read %s: %w", what, err)
	}
}

// offset is the file offset of the next unconsumed byte.
func (r *Reader) offset() int64 { return r.off + int64(r.pos) }

// hashTo hashes the consumed bytes up to buf[i].
func (r *Reader) hashTo(i int) {
	if i > r.hashed {
		r.h.Write(r.buf[r.hashed:i])
		r.hashed = i
	}
}

// fill makes at least n bytes (n ≤ len(buf)) available in buf[pos:end],
// moving them to the front first when they would not fit. It answers
// io.ErrUnexpectedEOF when the file ends first.
func (r *Reader) fill(n int) error {
	if r.end-r.pos >= n {
		return nil
	}
	if r.pos+n > len(r.buf) {
		r.hashTo(r.pos)
		copy(r.buf, r.buf[r.pos:r.end])
		r.off += int64(r.pos)
		r.end -= r.pos
		r.pos, r.hashed = 0, 0
	}
	for empty := 0; r.end-r.pos < n; {
		if r.srcErr != nil {
			if errors.Is(r.srcErr, io.EOF) {
				return io.ErrUnexpectedEOF
			}
			return r.srcErr
		}
		m, err := r.src.Read(r.buf[r.end:])
		r.end += m
		if err != nil {
			r.srcErr = err
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty >= 100 {
			r.srcErr = io.ErrNoProgress // as bufio does
		}
	}
	return nil
}

// take consumes n bytes (n ≤ len(buf)) and answers them in place, valid
// until the next read.
func (r *Reader) take(n int) ([]byte, error) {
	if err := r.fill(n); err != nil {
		return nil, err
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *Reader) uvarint() (uint64, error) {
	var v uint64
	for i, shift := 0, uint(0); ; i, shift = i+1, shift+7 {
		b, err := r.take(1)
		if err != nil {
			return 0, err
		}
		if i == binary.MaxVarintLen64-1 && b[0] > 1 || i >= binary.MaxVarintLen64 {
			return 0, fmt.Errorf("%w: varint overflows at byte %d", ErrCorrupt, r.offset()-1)
		}
		v |= uint64(b[0]&0x7f) << shift
		if b[0] < 0x80 {
			return v, nil
		}
	}
}

// chunk consumes a length-prefixed key or value (see read).
func (r *Reader) chunk(big *[]byte) (b []byte, inBuf bool, err error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, false, err
	}
	if n > MaxChunkBytes {
		return nil, false, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, n, MaxChunkBytes)
	}
	return r.read(int(n), big)
}

// read consumes n bytes. When they fit in half of buf they are answered in
// place (inBuf); more are gathered in *big as they arrive, so a length the
// file does not hold costs no memory.
func (r *Reader) read(n int, big *[]byte) (b []byte, inBuf bool, err error) {
	if n <= len(r.buf)/2 {
		b, err := r.take(n)
		return b, true, err
	}
	out := (*big)[:0]
	for left := n; left > 0; {
		if err := r.fill(1); err != nil {
			return nil, false, err
		}
		m := min(left, r.end-r.pos)
		out = append(out, r.buf[r.pos:r.pos+m]...)
		r.pos += m
		left -= m
	}
	*big = out
	return out, false, nil
}
