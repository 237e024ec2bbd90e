package format

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

const (
	sumA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	sumB = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func testManifest() Manifest {
	id := "20261206T043000Z-1a2b3c"
	return Manifest{
		ID: id, Parent: "20261205T043000Z-000001", Kind: KindIncremental, ClusterID: "c-1",
		CreatedUnixMs: 1_796_000_000_000, FinishedUnixMs: 1_796_000_060_000, StateFormat: 3, ShardCount: 2,
		Shards: []ShardEntry{
			{Shard: 1, Index: 500, Since: 400, Kind: KindIncremental, FileEntry: FileEntry{ShardFileName(id, 1), 1000, sumA}, Records: 20, Messages: 10},
			{Shard: 2, Index: 90, Kind: KindFull, FileEntry: FileEntry{ShardFileName(id, 2), 3000, sumB}, Records: 60, Messages: 30},
		},
		Meta:     FileEntry{MetaFileName(id), 200, sumA},
		Messages: 40, Bytes: 4200,
	}
}

func TestManifestRoundTrip(t *testing.T) {
	m := testManifest()
	b, err := MarshalManifest(m)
	if err != nil {
		t.Fatalf("MarshalManifest = %v", err)
	}
	got, err := ParseManifest(b)
	if err != nil {
		t.Fatalf("ParseManifest(MarshalManifest(m)) = %v", err)
	}
	m.Format = ManifestFormat
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("ParseManifest(MarshalManifest(m)) = %+v, want %+v", got, m)
	}
	// Shards come out sorted, and the caller's slice is left alone.
	slices.Reverse(m.Shards)
	if b, err = MarshalManifest(m); err != nil {
		t.Fatal(err)
	}
	got, err = ParseManifest(b)
	if err != nil || got.Shards[0].Shard != 1 || got.Shards[1].Shard != 2 || m.Shards[0].Shard != 2 {
		t.Fatalf("MarshalManifest(shards 2, 1) = shards %v, %v, want 1, 2 and the input unchanged", got.Shards, err)
	}
	slices.Reverse(m.Shards)
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("ParseManifest(MarshalManifest(m)) = %+v, want %+v", got, m)
	}
	for _, field := range []string{`"format": 1`, `"parent": "20261205T043000Z-000001"`, `"name": "backups/20261206T043000Z-1a2b3c/shard-1.sdb"`, `"since": 400`} {
		if !bytes.Contains(b, []byte(field)) {
			t.Errorf("MarshalManifest = %s, want it to hold %s", b, field)
		}
	}
}

func TestParseManifestRefuses(t *testing.T) {
	tests := []struct {
		name   string
		change func(m *Manifest)
		says   string
	}{
		{"no id", func(m *Manifest) { m.ID = "" }, "backup id"},
		{"bad id", func(m *Manifest) { m.ID = "../../etc" }, "backup id"},
		{"unknown kind", func(m *Manifest) { m.Kind = "differential" }, `kind "differential"`},
		{"incremental without parent", func(m *Manifest) { m.Parent = "" }, "without a parent"},
		{"full with parent", func(m *Manifest) {
			m.Kind = KindFull
			m.Shards = m.Shards[1:]
		}, "full backup with parent"},
		{"bad parent", func(m *Manifest) { m.Parent = "yesterday" }, "parent id"},
		{"own parent", func(m *Manifest) { m.Parent = m.ID }, "own parent"},
		{"shard twice", func(m *Manifest) { m.Shards[1].Shard = 1 }, "shard 1 is listed twice"},
		{"unknown shard kind", func(m *Manifest) { m.Shards[0].Kind = "" }, `shard 1: kind ""`},
		{"full capture since", func(m *Manifest) { m.Shards[1].Since = 3 }, "full capture since index 3"},
		{"incremental since 0", func(m *Manifest) { m.Shards[0].Since = 0 }, "since index 0"},
		{"incremental capture in full backup", func(m *Manifest) { m.Kind, m.Parent = KindFull, "" }, "incremental capture in a full backup"},
		{"short checksum", func(m *Manifest) { m.Shards[0].SHA256 = "abc" }, "not 64 lower-case hex digits"},
		{"upper-case checksum", func(m *Manifest) { m.Shards[0].SHA256 = strings.ToUpper(sumB) }, "hex"},
		{"non-hex checksum", func(m *Manifest) { m.Meta.SHA256 = strings.Repeat("g", 64) }, "meta"},
		{"nameless file", func(m *Manifest) { m.Shards[1].Name = "" }, "without a name"},
		{"negative size", func(m *Manifest) { m.Meta.Bytes = -1 }, "-1 bytes"},
		{"no meta", func(m *Manifest) { m.Meta = FileEntry{} }, "meta"},
		{"negative format", func(m *Manifest) { m.Format = -1 }, "format -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := testManifest()
			m.Format = ManifestFormat
			tt.change(&m)
			if _, err := MarshalManifest(m); err == nil || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("MarshalManifest = %v, want an error saying %q", err, tt.says)
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ParseManifest(b)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tt.says) {
				t.Errorf("ParseManifest = %v, want ErrCorrupt saying %q", err, tt.says)
			}
		})
	}
	for _, b := range []string{"", "{", "[]", `{"format":1} {}`} {
		if _, err := ParseManifest([]byte(b)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("ParseManifest(%q) = %v, want ErrCorrupt", b, err)
		}
	}
}

func TestParseManifestNewerFormat(t *testing.T) {
	// A newer manifest may change anything: only its format is read.
	_, err := ParseManifest([]byte(`{"format": 2, "id": 7, "shards": "elsewhere"}`))
	var fe *VersionError
	if !errors.As(err, &fe) || fe.Found != 2 || fe.Known != ManifestFormat || !strings.Contains(err.Error(), "newer Sundial") {
		t.Fatalf("ParseManifest(format 2) = %v, want *VersionError{Found: 2, Known: %d} saying newer Sundial", err, ManifestFormat)
	}
}

func TestNames(t *testing.T) {
	id := "20261206T043000Z-1a2b3c"
	tests := []struct{ got, want string }{
		{ManifestName(id), "backups/20261206T043000Z-1a2b3c/MANIFEST.json"},
		{ShardFileName(id, 12), "backups/20261206T043000Z-1a2b3c/shard-12.sdb"},
		{MetaFileName(id), "backups/20261206T043000Z-1a2b3c/meta.sdb"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("name = %q, want %q", tt.got, tt.want)
		}
	}
}

func TestNewID(t *testing.T) {
	at := time.Date(2026, 12, 6, 4, 30, 0, 0, time.UTC)
	tests := []struct {
		name string
		t    time.Time
		rand []byte
		want string
	}{
		{"utc", at, []byte{0x1a, 0x2b, 0x3c}, "20261206T043000Z-1a2b3c"},
		{"other zone", at.In(time.FixedZone("CET", 3600)), []byte{0, 0, 1}, "20261206T043000Z-000001"},
		{"failing rand", at.Add(0x123456), nil, "20261206T043000Z-123456"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := iotest.ErrReader(errors.New("no entropy"))
			if tt.rand != nil {
				r = bytes.NewReader(tt.rand)
			}
			got := NewID(tt.t, r)
			if got != tt.want || !ValidID(got) {
				t.Fatalf("NewID(%v) = %q (valid %t), want %q", tt.t, got, ValidID(got), tt.want)
			}
		})
	}
	// Ids sort by time.
	var ids []string
	for i := range 5 {
		ids = append(ids, NewID(at.Add(time.Duration(4-i)*time.Hour), bytes.NewReader([]byte{byte(i), 0, 0})))
	}
	if slices.Reverse(ids); !slices.IsSorted(ids) {
		t.Fatalf("ids of increasing time %v do not sort", ids)
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"20261206T043000Z-1a2b3c", true},
		{"20261206T043000Z-1A2B3C", false},
		{"20261206T043000Z-1a2b3", false},
		{"20261206T043000Z-1a2b3c4", false},
		{"20261206T043000Z-1a2b3g", false},
		{"20261306T043000Z-1a2b3c", false},
		{"20261206T043000-1a2b3c", false},
		{"20261206T043000Z1a2b3c", false},
		{"2026-12-06T04:30:00Z-1a2b3c", false},
		{"../20261206T043000Z-1a2b3c", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %t, want %t", tt.id, got, tt.want)
		}
	}
}
