package format

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
)

const (
	// Magic starts every backup file.
	Magic = "SUNDIALB"
	// FormatVersion is the version of the backup file format this binary
	// writes and the newest it reads.
	FormatVersion = 1
	// MaxChunkBytes bounds a record's key and its value.
	MaxChunkBytes = 64 << 20
	// MaxHeaderBytes bounds a file's header.
	MaxHeaderBytes = 1 << 20
)

// Kinds of backup file (Header.Kind).
const (
	KindShard = "shard"
	KindMeta  = "meta"
)

// Header describes a backup file; it follows the file's version.
type Header struct {
	// Kind is KindShard or KindMeta.
	Kind string `json:"kind"`
	// BackupID is the backup the file belongs to; ClusterID the cluster
	// it was taken from.
	BackupID  string `json:"backup_id"`
	ClusterID string `json:"cluster_id"`
	// Shard is the shard captured (0 for the meta group).
	Shard uint64 `json:"shard"`
	// Index is the Raft index the captured state is at; Since the index an
	// incremental capture builds on, 0 for a full one.
	Index uint64 `json:"index"`
	Since uint64 `json:"since"`
	// StateFormat is the state machine's key layout version of the keys
	// and values captured (keys.FormatVersion for a shard).
	StateFormat uint32 `json:"state_format"`
	// CreatedUnixMs is when the capture started.
	CreatedUnixMs int64 `json:"created_unix_ms"`
}

// Op is what a record does.
type Op byte

// Record ops, and the byte that starts a file's end.
const (
	OpSet    Op = 1
	OpDelete Op = 2
	opEnd    Op = 0xFF
)

func (o Op) String() string {
	switch o {
	case OpSet:
		return "set"
	case OpDelete:
		return "delete"
	default:
		return fmt.Sprintf("op(0x%02x)", byte(o))
	}
}

// Record is one record of a backup file. Value is nil for OpDelete.
type Record struct {
	Op         Op
	Key, Value []byte
}

var (
	// ErrTruncated is wrapped by the error for a backup file cut short.
	ErrTruncated = errors.New("format: backup file truncated")
	// ErrCorrupt is wrapped by the error for bytes that are not a valid
	// backup file or manifest: altered, or not one at all.
	ErrCorrupt = errors.New("format: backup corrupt")
	// ErrTooLarge refuses a key, value or header over its limit.
	ErrTooLarge = errors.New("format: too large")
	// errClosed refuses a write to a closed Writer.
	errClosed = errors.New("format: writer closed")
)

// VersionError refuses a backup file or manifest written in a format newer
// than this binary reads.
type VersionError struct {
	// What is "backup file" or "manifest".
	What string
	// Found is the format read; Known the newest this binary reads.
	Found, Known int
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("format: %s in format %d, newer than format %d this sundial reads: "+
		"it was written by a newer Sundial; upgrade to read it", e.What, e.Found, e.Known)
}

func (h Header) validate() error {
	if h.Kind != KindShard && h.Kind != KindMeta {
		return fmt.Errorf("header kind %q, want %q or %q", h.Kind, KindShard, KindMeta)
	}
	return nil
}

// Summary describes a file a Writer wrote.
type Summary struct {
	// Bytes is the file's length; Records how many records it holds.
	Bytes   int64
	Records uint64
	// SHA256 is the hex SHA-256 of the whole file, end included.
	SHA256 string
}

// Writer writes a backup file. Its methods buffer; Close writes the end
// and flushes. An error is sticky: every later call returns it.
type Writer struct {
	// bw buffers writes to hw. Its first write error is kept in err,
	// after which nothing more is written.
	bw      *bufio.Writer
	hw      hashWriter
	records uint64
	scratch [binary.MaxVarintLen64 + 1]byte
	err     error
}

// hashWriter passes writes to w, hashing and counting them.
type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (hw *hashWriter) Write(p []byte) (int, error) {
	n, err := hw.w.Write(p)
	hw.h.Write(p[:n])
	hw.n += int64(n)
	return n, err
}

// NewWriter starts a backup file of h on w: it writes the magic, version
// and header (buffered). It refuses a header of unknown kind or over
// MaxHeaderBytes.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	if err := h.validate(); err != nil {
		return nil, fmt.Errorf("format: %w", err)
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("format: header: %w", err)
	}
	if len(js) > MaxHeaderBytes {
		return nil, fmt.Errorf("%w: header of %d bytes, limit %d", ErrTooLarge, len(js), MaxHeaderBytes)
	}
	bw := &Writer{hw: hashWriter{w: w, h: sha256.New()}}
	bw.bw = bufio.NewWriterSize(&bw.hw, 256<<10)
	bw.writeString(Magic)
	bw.uvarint(FormatVersion)
	bw.uvarint(uint64(len(js)))
	bw.write(js)
	// A header the buffer could not write through leaves err set: every
	// later call returns it.
	return bw, nil
}

// setErr keeps err, the first write error, for every later call.
func (w *Writer) setErr(err error) {
	w.err = fmt.Errorf("format: write: %w", err)
}

// write, writeString and writeByte buffer their bytes unless an earlier
// write failed; a failure is kept in w.err.
func (w *Writer) write(b []byte) {
	if w.err != nil {
		return
	}
	if _, err := w.bw.Write(b); err != nil {
		w.setErr(err)
	}
}

func (w *Writer) writeString(s string) {
	if w.err != nil {
		return
	}
	if _, err := w.bw.WriteString(s); err != nil {
		w.setErr(err)
	}
}

func (w *Writer) writeByte(b byte) {
	if w.err != nil {
		return
	}
	if err := w.bw.WriteByte(b); err != nil {
		w.setErr(err)
	}
}

func (w *Writer) uvarint(v uint64) {
	n := binary.PutUvarint(w.scratch[:], v)
	w.write(w.scratch[:n])
}

// chunk writes a length-prefixed key or value.
func (w *Writer) chunk(b []byte) {
	w.uvarint(uint64(len(b)))
	w.write(b)
}

func (w *Writer) check(what string, b []byte) error {
	if w.err != nil {
		return w.err
	}
	if len(b) > MaxChunkBytes {
		return fmt.Errorf("%w: %s of %d bytes, limit %d", ErrTooLarge, what, len(b), MaxChunkBytes)
	}
	return nil
}

// Set writes a record setting key to value.
func (w *Writer) Set(key, value []byte) error {
	if err := w.check("key", key); err != nil {
		return err
	}
	if err := w.check("value", value); err != nil {
		return err
	}
	w.writeByte(byte(OpSet))
	w.chunk(key)
	w.chunk(value)
	w.records++
	return w.err
}

// Delete writes a record deleting key.
func (w *Writer) Delete(key []byte) error {
	if err := w.check("key", key); err != nil {
		return err
	}
	w.writeByte(byte(OpDelete))
	w.chunk(key)
	w.records++
	return w.err
}

// Close writes the end of the file and flushes it; it does not close the
// underlying writer. The Summary describes the whole file.
func (w *Writer) Close() (Summary, error) {
	if w.err != nil {
		return Summary{}, w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.setErr(err)
		return Summary{}, w.err
	}
	sum := w.hw.h.Sum(nil) // every byte before the end op
	w.writeByte(byte(opEnd))
	w.uvarint(w.records)
	w.write(sum)
	if w.err != nil {
		return Summary{}, w.err
	}
	if err := w.bw.Flush(); err != nil {
		w.setErr(err)
		return Summary{}, w.err
	}
	w.err = errClosed
	return Summary{Bytes: w.hw.n, Records: w.records, SHA256: hex.EncodeToString(w.hw.h.Sum(nil))}, nil
}
