package format

import (
	"bytes"
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ManifestFormat is the version of the manifest this binary writes and the
// newest it reads.
const ManifestFormat = 1

// Kinds of backup (Manifest.Kind) and of shard capture (ShardEntry.Kind).
const (
	KindFull        = "full"
	KindIncremental = "incremental"
)

// Manifest describes a finished backup. It is written last: a backup
// without one does not exist.
type Manifest struct {
	// Format is ManifestFormat when written.
	Format int `json:"format"`
	// ID names the backup (NewID); Parent the backup an incremental one
	// builds on, empty for a full one.
	ID     string `json:"id"`
	Parent string `json:"parent,omitempty"`
	// Kind is KindFull or KindIncremental.
	Kind      string `json:"kind"`
	ClusterID string `json:"cluster_id"`
	// CreatedUnixMs is when the backup started; FinishedUnixMs when its
	// last file was stored.
	CreatedUnixMs  int64 `json:"created_unix_ms"`
	FinishedUnixMs int64 `json:"finished_unix_ms"`
	// StateFormat is the state machine's key layout version of the shard
	// captures (keys.FormatVersion).
	StateFormat uint32 `json:"state_format"`
	// ShardCount is how many shards the cluster had; Shards one entry per
	// shard captured (MarshalManifest sorts them by shard).
	ShardCount int          `json:"shard_count"`
	Shards     []ShardEntry `json:"shards"`
	// Meta is the meta group's catalog.
	Meta FileEntry `json:"meta"`
	// Messages and Bytes total the messages captured and the bytes of the
	// backup's files.
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
}

// ShardEntry is one shard's capture in a backup.
type ShardEntry struct {
	Shard uint64 `json:"shard"`
	// Index is the Raft index the capture is at; Since the index an
	// incremental capture builds on (0 for a full one).
	Index uint64 `json:"index"`
	Since uint64 `json:"since,omitempty"`
	// Kind is KindFull or KindIncremental: an incremental backup holds a
	// full capture of a shard its change journal did not cover.
	Kind string `json:"kind"`
	FileEntry
	// Records and Messages count the file's records and the message
	// bodies among them.
	Records  int64 `json:"records"`
	Messages int64 `json:"messages"`
}

// FileEntry names one file of a backup and what it must hold.
type FileEntry struct {
	// Name is the object's name in the destination.
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	// SHA256 is the hex SHA-256 of the whole file (Summary.SHA256).
	SHA256 string `json:"sha256"`
}

// MarshalManifest encodes m, as ManifestFormat when m.Format is 0 and with
// its shards sorted, once it is valid (see ParseManifest).
func MarshalManifest(m Manifest) ([]byte, error) {
	if m.Format == 0 {
		m.Format = ManifestFormat
	}
	m.Shards = slices.SortedFunc(slices.Values(m.Shards), func(a, b ShardEntry) int { return cmp.Compare(a.Shard, b.Shard) })
	if err := m.validate(); err != nil {
		return nil, fmt.Errorf("format: manifest %s: %w", m.ID, err)
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("format: manifest %s: %w", m.ID, err)
	}
	return append(b, '\n'), nil
}

// ParseManifest decodes and checks a manifest: a format newer than
// ManifestFormat is a *VersionError; a manifest that is not valid wraps
// ErrCorrupt. Valid: a backup ID, known kinds, a parent for an
// incremental backup (none for a full one), each shard once, files named
// with sizes and hex SHA-256 checksums.
func ParseManifest(b []byte) (Manifest, error) {
	var probe struct {
		Format int `json:"format"`
	}
	if err := json.Unmarshal(b, &probe); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if probe.Format > ManifestFormat {
		return Manifest{}, &VersionError{What: "manifest", Found: probe.Format, Known: ManifestFormat}
	}
	var m Manifest
	d := json.NewDecoder(bytes.NewReader(b))
	if err := d.Decode(&m); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest: %w", ErrCorrupt, err)
	}
	if _, err := d.Token(); err != io.EOF {
		return Manifest{}, fmt.Errorf("%w: manifest: bytes after the JSON object", ErrCorrupt)
	}
	if err := m.validate(); err != nil {
		return Manifest{}, fmt.Errorf("%w: manifest %s: %w", ErrCorrupt, m.ID, err)
	}
	return m, nil
}

func (m Manifest) validate() error {
	switch {
	case m.Format < 1:
		return fmt.Errorf("format %d", m.Format)
	case m.Format > ManifestFormat:
		return fmt.Errorf("format %d, newer than %d", m.Format, ManifestFormat)
	case !ValidID(m.ID):
		return fmt.Errorf("backup id %q is not one NewID makes", m.ID)
	case m.Kind != KindFull && m.Kind != KindIncremental:
		return fmt.Errorf("kind %q, want %q or %q", m.Kind, KindFull, KindIncremental)
	case m.Kind == KindIncremental && m.Parent == "":
		return fmt.Errorf("an incremental backup without a parent")
	case m.Kind == KindFull && m.Parent != "":
		return fmt.Errorf("a full backup with parent %q", m.Parent)
	case m.Parent != "" && !ValidID(m.Parent):
		return fmt.Errorf("parent id %q is not one NewID makes", m.Parent)
	case m.Parent == m.ID:
		return fmt.Errorf("the backup is its own parent")
	}
	seen := make(map[uint64]bool, len(m.Shards))
	for _, e := range m.Shards {
		switch {
		case seen[e.Shard]:
			return fmt.Errorf("shard %d is listed twice", e.Shard)
		case e.Kind != KindFull && e.Kind != KindIncremental:
			return fmt.Errorf("shard %d: kind %q, want %q or %q", e.Shard, e.Kind, KindFull, KindIncremental)
		case e.Kind == KindFull && e.Since != 0:
			return fmt.Errorf("shard %d: a full capture since index %d", e.Shard, e.Since)
		case e.Kind == KindIncremental && m.Kind == KindFull:
			return fmt.Errorf("shard %d: an incremental capture in a full backup", e.Shard)
		case e.Kind == KindIncremental && e.Since == 0:
			return fmt.Errorf("shard %d: an incremental capture since index 0", e.Shard)
		case e.Records < 0 || e.Messages < 0:
			return fmt.Errorf("shard %d: negative counts", e.Shard)
		}
		seen[e.Shard] = true
		if err := e.validate(); err != nil {
			return fmt.Errorf("shard %d: %w", e.Shard, err)
		}
	}
	if err := m.Meta.validate(); err != nil {
		return fmt.Errorf("meta: %w", err)
	}
	return nil
}

func (e FileEntry) validate() error {
	switch {
	case e.Name == "":
		return fmt.Errorf("a file without a name")
	case e.Bytes < 0:
		return fmt.Errorf("file %s of %d bytes", e.Name, e.Bytes)
	case !validSHA256(e.SHA256):
		return fmt.Errorf("file %s: SHA-256 %q is not 64 lower-case hex digits", e.Name, e.SHA256)
	}
	return nil
}

func validSHA256(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// Prefix is where a destination keeps its backups.
const Prefix = "backups/"

// BackupDir is the prefix of every file of backup id.
func BackupDir(id string) string { return Prefix + id + "/" }

// ManifestName is the object name of backup id's manifest.
func ManifestName(id string) string { return Prefix + id + "/MANIFEST.json" }

// ShardFileName is the object name of shard's file in backup id.
func ShardFileName(id string, shard uint64) string {
	return Prefix + id + "/shard-" + strconv.FormatUint(shard, 10) + ".sdb"
}

// MetaFileName is the object name of the meta catalog's file in backup id.
func MetaFileName(id string) string { return Prefix + id + "/meta.sdb" }

const (
	idTime      = "20060102T150405Z"
	idSuffixLen = 6
)

// NewID makes a backup id from t and three bytes of rand (hex): ids sort by
// their time, to the second, e.g. 20261206T043000Z-1a2b3c. Should rand
// fail, the suffix comes from t's nanoseconds.
func NewID(t time.Time, rand io.Reader) string {
	var b [idSuffixLen / 2]byte
	if _, err := io.ReadFull(rand, b[:]); err != nil {
		ns := t.Nanosecond()
		b = [3]byte{byte(ns >> 16), byte(ns >> 8), byte(ns)}
	}
	return t.UTC().Format(idTime) + "-" + hex.EncodeToString(b[:])
}

// ValidID reports whether id is one NewID makes.
func ValidID(id string) bool {
	ts, suffix, ok := strings.Cut(id, "-")
	if !ok || len(suffix) != idSuffixLen || strings.ToLower(suffix) != suffix {
		return false
	}
	if _, err := hex.DecodeString(suffix); err != nil {
		return false
	}
	t, err := time.Parse(idTime, ts)
	return err == nil && t.Format(idTime) == ts
}
