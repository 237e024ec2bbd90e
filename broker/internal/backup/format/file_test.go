package format

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

var testHeader = Header{Kind: KindShard, BackupID: "20261206T043000Z-1a2b3c", ClusterID: "c-1", Shard: 7, Index: 1200, Since: 900, StateFormat: 3, CreatedUnixMs: 1_796_000_000_000}

// write encodes recs as a backup file of h.
func write(t testing.TB, h Header, recs []Record) ([]byte, Summary) {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf, h)
	if err != nil {
		t.Fatalf("NewWriter(%+v) = %v", h, err)
	}
	for _, r := range recs {
		if r.Op == OpSet {
			err = w.Set(r.Key, r.Value)
		} else {
			err = w.Delete(r.Key)
		}
		if err != nil {
			t.Fatalf("write %s %q = %v", r.Op, r.Key, err)
		}
	}
	sum, err := w.Close()
	if err != nil {
		t.Fatalf("Close() = %v", err)
	}
	return buf.Bytes(), sum
}

// readFile reads a whole backup file: its header and records (copied), or
// the first error that is not io.EOF.
func readFile(data []byte) (Header, []Record, error) {
	r, err := NewReader(bytes.NewReader(data))
	if err != nil {
		return Header{}, nil, err
	}
	var recs []Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			if again, err2 := r.Next(); !errors.Is(err2, io.EOF) {
				return Header{}, nil, fmt.Errorf("Next after io.EOF = %v, %w", again, err2)
			}
			return r.Header(), recs, nil
		}
		if err != nil {
			return Header{}, nil, err
		}
		c := Record{Op: rec.Op, Key: bytes.Clone(rec.Key)}
		if rec.Value != nil {
			c.Value = bytes.Clone(rec.Value)
		}
		recs = append(recs, c)
	}
}

func set(k, v string) Record { return Record{Op: OpSet, Key: []byte(k), Value: []byte(v)} }
func del(k string) Record    { return Record{Op: OpDelete, Key: []byte(k)} }

func sameRecords(a, b []Record) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Op != b[i].Op || !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			return false
		}
	}
	return true
}

// smallFile is a short valid file with both kinds of record.
func smallFile(t testing.TB) []byte {
	data, _ := write(t, Header{Kind: KindShard, BackupID: "20261206T043000Z-1a2b3c", Shard: 1, Index: 9}, []Record{
		set("m/1", "body one"), del("m/0"), set("", ""), set("d/1", "x"),
	})
	return data
}

func TestRoundTrip(t *testing.T) {
	many := make([]Record, 0, 20_000)
	for i := range 20_000 {
		if i%7 == 0 {
			many = append(many, del(fmt.Sprintf("key-%08d", i)))
		} else {
			many = append(many, set(fmt.Sprintf("key-%08d", i), strings.Repeat("v", i%300)))
		}
	}
	big := strings.Repeat("0123456789abcdef", 200<<10/16) // over half the read buffer
	tests := []struct {
		name string
		h    Header
		recs []Record
	}{
		{"no records", testHeader, nil},
		{"header near its limit", Header{Kind: KindMeta, ClusterID: strings.Repeat("c", MaxHeaderBytes-200)}, []Record{set("k", "v")}},
		{"meta", Header{Kind: KindMeta, BackupID: "20261206T043000Z-1a2b3c"}, []Record{set("topic/a", "{}")}},
		{"sets and deletes", testHeader, []Record{set("a", "1"), del("b"), set("c", "")}},
		{"empty key and value", testHeader, []Record{set("", ""), del("")}},
		{"binary", testHeader, []Record{set("\x00\xff\x01", "\xff\xff\xff\x00"), del("\xff")}},
		{"large values", testHeader, []Record{set("k1", big), set(big, "v"), set(big, big), del(big), set("k2", "after")}},
		{"across buffer refills", testHeader, many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, sum := write(t, tt.h, tt.recs)
			h, recs, err := readFile(data)
			if err != nil {
				t.Fatalf("read = %v", err)
			}
			if h != tt.h {
				t.Fatalf("Header() = %+v, want %+v", h, tt.h)
			}
			if !sameRecords(recs, tt.recs) {
				t.Fatalf("read %d records, differing from the %d written", len(recs), len(tt.recs))
			}
			want := sha256.Sum256(data)
			if sum != (Summary{Bytes: int64(len(data)), Records: uint64(len(tt.recs)), SHA256: hex.EncodeToString(want[:])}) {
				t.Fatalf("Close() = %+v, want %d bytes, %d records, SHA-256 %x", sum, len(data), len(tt.recs), want)
			}
		})
	}
}

func TestLayout(t *testing.T) {
	data, _ := write(t, Header{Kind: KindShard}, []Record{set("k", "vv"), del("d")})
	hdr := `{"kind":"shard","backup_id":"","cluster_id":"","shard":0,"index":0,"since":0,"state_format":0,"created_unix_ms":0}`
	body := "SUNDIALB\x01" + string(binary.AppendUvarint(nil, uint64(len(hdr)))) + hdr + "\x01\x01k\x02vv" + "\x02\x01d"
	sum := sha256.Sum256([]byte(body))
	want := body + "\xff\x02" + string(sum[:])
	if string(data) != want {
		t.Fatalf("file = %q, want %q", data, want)
	}
}

// TestTruncatedAtEveryOffset cuts a file at every byte: each cut reads as
// truncated, never as a complete file.
func TestTruncatedAtEveryOffset(t *testing.T) {
	data := smallFile(t)
	for n := range len(data) {
		_, _, err := readFile(data[:n])
		if !errors.Is(err, ErrTruncated) {
			t.Errorf("read(first %d of %d bytes) = %v, want ErrTruncated", n, len(data), err)
		}
	}
}

// TestAlteredAtEveryByte changes each byte in turn: no change reads as a
// complete file.
func TestAlteredAtEveryByte(t *testing.T) {
	data := smallFile(t)
	for i := range data {
		for _, x := range []byte{0x01, 0x80, 0xff} {
			altered := bytes.Clone(data)
			altered[i] ^= x
			_, _, err := readFile(altered)
			var fe *VersionError
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && !errors.As(err, &fe) {
				t.Errorf("read(byte %d ^ 0x%02x) = %v, want ErrCorrupt, ErrTruncated or *VersionError", i, x, err)
			}
		}
	}
}

func TestReaderRefuses(t *testing.T) {
	valid := smallFile(t)
	end := bytes.LastIndexByte(valid[:len(valid)-sha256.Size], byte(opEnd))
	// body is a valid file's bytes up to its end op: endWith completes it.
	body := valid[:end]
	endWith := func(count uint64, b []byte) []byte {
		sum := sha256.Sum256(b)
		return append(binary.AppendUvarint(append(bytes.Clone(b), byte(opEnd)), count), sum[:]...)
	}
	headerWith := func(js string) []byte {
		return binary.AppendUvarint([]byte("SUNDIALB\x01"), uint64(len(js)))
	}
	tests := []struct {
		name string
		data []byte
		want error
		says string
	}{
		{"not a backup", []byte("PK\x03\x04 a zip file, really"), ErrCorrupt, "not a Sundial backup file"},
		{"short and foreign", []byte("hi"), ErrCorrupt, "not a Sundial backup file"},
		{"empty", nil, ErrTruncated, "magic"},
		{"version 0", []byte("SUNDIALB\x00"), ErrCorrupt, "format version 0"},
		{"header too large", binary.AppendUvarint([]byte("SUNDIALB\x01"), MaxHeaderBytes+1), ErrCorrupt, "header of"},
		{"header not JSON", append(headerWith("{nope"), "{nope"...), ErrCorrupt, "header"},
		{"header of unknown kind", append(headerWith(`{"kind":"wal"}`), `{"kind":"wal"}`...), ErrCorrupt, `kind "wal"`},
		{"varint overflow", []byte("SUNDIALB\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), ErrCorrupt, "overflows"},
		{"unknown op", endWith(4, append(bytes.Clone(body), 0x03)), ErrCorrupt, "unknown record op 0x03"},
		{"count too low", endWith(3, body), ErrCorrupt, "counts 3 records, the file holds 4"},
		{"count too high", endWith(5, body), ErrCorrupt, "counts 5 records"},
		{"checksum", append(bytes.Clone(valid[:len(valid)-1]), valid[len(valid)-1]^1), ErrCorrupt, "checksum mismatch"},
		{"bytes after the end", append(bytes.Clone(valid), 0), ErrCorrupt, "after the end"},
		{"no end", body, ErrTruncated, "inside the record"},
		{"key too long", append(append(bytes.Clone(body), byte(OpSet)), binary.AppendUvarint(nil, MaxChunkBytes+1)...), ErrCorrupt, "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := readFile(tt.data)
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("read = %v, want %v saying %q", err, tt.want, tt.says)
			}
		})
	}
}

func TestNewerFormat(t *testing.T) {
	data := smallFile(t)
	data[len(Magic)] = FormatVersion + 1
	_, err := NewReader(bytes.NewReader(data))
	var fe *VersionError
	if !errors.As(err, &fe) || fe.Found != FormatVersion+1 || fe.Known != FormatVersion {
		t.Fatalf("NewReader(format %d) = %v, want *VersionError{Found: %d, Known: %d}", FormatVersion+1, err, FormatVersion+1, FormatVersion)
	}
	for _, w := range []string{"newer Sundial", "upgrade"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("NewReader(format %d) = %q, want it to say %q", FormatVersion+1, err, w)
		}
	}
}

type failingWriter struct{ after int }

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.after < len(p) {
		n := max(f.after, 0)
		f.after = 0
		return n, errors.New("disk full")
	}
	f.after -= len(p)
	return len(p), nil
}

func TestWriterErrors(t *testing.T) {
	if _, err := NewWriter(io.Discard, Header{Kind: "wal"}); err == nil {
		t.Fatalf("NewWriter(kind wal) = nil error, want one")
	}
	if _, err := NewWriter(io.Discard, Header{Kind: KindMeta, ClusterID: strings.Repeat("c", MaxHeaderBytes)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("NewWriter(header over %d bytes) = %v, want ErrTooLarge", MaxHeaderBytes, err)
	}
	w, err := NewWriter(io.Discard, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	huge := make([]byte, MaxChunkBytes+1)
	if err := w.Set(huge, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Set(key of %d bytes) = %v, want ErrTooLarge", len(huge), err)
	}
	if err := w.Set([]byte("k"), huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Set(value of %d bytes) = %v, want ErrTooLarge", len(huge), err)
	}
	if err := w.Delete(huge); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("Delete(key of %d bytes) = %v, want ErrTooLarge", len(huge), err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatalf("Close() after refused records = %v", err)
	}
	if err := w.Set([]byte("k"), nil); err == nil {
		t.Fatalf("Set after Close = nil, want an error")
	}

	// A write error is sticky, and Close reports it.
	w, err = NewWriter(&failingWriter{after: 1000}, testHeader)
	if err != nil {
		t.Fatal(err)
	}
	value := make([]byte, 64<<10)
	var setErr error
	for i := 0; i < 100 && setErr == nil; i++ {
		setErr = w.Set([]byte("k"), value)
	}
	if setErr == nil || !strings.Contains(setErr.Error(), "disk full") {
		t.Fatalf("Set on a failing writer = %v, want disk full", setErr)
	}
	if err := w.Delete([]byte("k")); err == nil {
		t.Fatalf("Delete after a write error = nil, want the error")
	}
	if _, err := w.Close(); err == nil {
		t.Fatalf("Close after a write error = nil, want the error")
	}
}

// FuzzReader reads arbitrary bytes: it must not panic or grow memory past
// what the input holds, and a file it accepts must survive rewriting.
func FuzzReader(f *testing.F) {
	f.Add(smallFile(f))
	empty, _ := write(f, testHeader, nil)
	f.Add(empty)
	f.Add([]byte("SUNDIALB\x01\x02{}"))
	f.Add(smallFile(f)[:30])
	f.Fuzz(func(t *testing.T, data []byte) {
		h, recs, err := readFile(data)
		if err != nil {
			var fe *VersionError
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTruncated) && !errors.As(err, &fe) {
				t.Fatalf("read = %v, want ErrCorrupt, ErrTruncated or *VersionError", err)
			}
			return
		}
		again, _ := write(t, h, recs)
		h2, recs2, err := readFile(again)
		if err != nil || h2 != h || !sameRecords(recs, recs2) {
			t.Fatalf("rewritten file reads as %+v, %d records, %v; want %+v, %d records", h2, len(recs2), err, h, len(recs))
		}
	})
}

func BenchmarkWriter(b *testing.B) {
	key := []byte("s/00000007/m/0123456789abcdef")
	value := bytes.Repeat([]byte("v"), 200)
	w, err := NewWriter(io.Discard, testHeader)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(key) + len(value) + 4))
	for b.Loop() {
		if err := w.Set(key, value); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkReader(b *testing.B) {
	recs := make([]Record, 10_000)
	for i := range recs {
		recs[i] = set(fmt.Sprintf("s/00000007/m/%016d", i), strings.Repeat("v", 200))
	}
	data, _ := write(b, testHeader, recs)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, err := NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := r.Next(); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				b.Fatal(err)
			}
		}
	}
}
