package format

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"

	"github.com/sundialmq/sundial/broker/internal/backup/store"
)

// maxManifestBytes bounds a manifest read from a destination.
const maxManifestBytes = 64 << 20

// ListManifests answers the manifests of every backup in s, oldest first:
// by the time each was created, then by id (ids name the second only, so two
// backups of one second sort by their creation times).
// A backup without a manifest is not listed (see Unfinished). A manifest
// that cannot be read or parsed, or names another backup than its
// directory, fails the whole listing, naming it: retention must not delete
// the parent of a backup it cannot read.
func ListManifests(ctx context.Context, s store.Store) ([]Manifest, error) {
	objs, err := s.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	var ms []Manifest
	for id, names := range backupDirs(objs) {
		if !slices.Contains(names, ManifestName(id)) {
			continue
		}
		m, err := ReadManifest(ctx, s, id)
		if err != nil {
			return nil, err
		}
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b Manifest) int {
		return cmp.Or(cmp.Compare(a.CreatedUnixMs, b.CreatedUnixMs), cmp.Compare(a.ID, b.ID))
	})
	return ms, nil
}

// ReadManifest reads and parses the manifest of backup id in s; a missing
// one wraps store.ErrNotFound.
func ReadManifest(ctx context.Context, s store.Store, id string) (Manifest, error) {
	name := ManifestName(id)
	rc, err := s.Open(ctx, name)
	if err != nil {
		return Manifest{}, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxManifestBytes+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("format: read %s: %w", name, err)
	}
	if len(b) > maxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: %s is over %d bytes", ErrCorrupt, name, maxManifestBytes)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", name, err)
	}
	if m.ID != id {
		return Manifest{}, fmt.Errorf("%w: %s names backup %s", ErrCorrupt, name, m.ID)
	}
	return m, nil
}

// Unfinished answers, sorted, the ids of the backups in s that have files
// but no manifest: abandoned, or still being written. Deleting one that
// is in progress breaks that backup; the caller leaves the running one
// alone.
func Unfinished(ctx context.Context, s store.Store) ([]string, error) {
	objs, err := s.List(ctx, Prefix)
	if err != nil {
		return nil, err
	}
	var ids []string
	for id, names := range backupDirs(objs) {
		if !slices.Contains(names, ManifestName(id)) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// backupDirs groups the names of objs by the backup id of their
// directory, leaving out names outside backups/<valid id>/.
func backupDirs(objs []store.Object) map[string][]string {
	dirs := map[string][]string{}
	for _, o := range objs {
		rest, ok := strings.CutPrefix(o.Name, Prefix)
		if !ok {
			continue
		}
		id, _, ok := strings.Cut(rest, "/")
		if !ok || !ValidID(id) {
			continue
		}
		dirs[id] = append(dirs[id], o.Name)
	}
	return dirs
}

// VerifyFile reads the file e names from s to its end and checks that it
// is a valid backup file of the size and SHA-256 e records. Its error
// names the file and says whether it is missing (store.ErrNotFound),
// truncated (ErrTruncated) or altered (ErrCorrupt).
func VerifyFile(ctx context.Context, s store.Store, e FileEntry) error {
	_, _, err := verifyFile(ctx, s, e, nil)
	return err
}

// progressReader counts and hashes what is read through it, and reports
// the count every progressStep bytes.
type progressReader struct {
	ctx      context.Context
	r        io.Reader
	h        hash.Hash
	n        int64
	reported int64
	report   func(n int64)
}

const progressStep = 4 << 20

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.h.Write(b[:n])
	p.n += int64(n)
	if p.report != nil && p.n-p.reported >= progressStep {
		p.reported = p.n
		p.report(p.n)
	}
	return n, err
}

// verifyFile verifies the file e names and answers its header and record
// count; report, when not nil, is told the bytes read so far as they
// grow.
func verifyFile(ctx context.Context, s store.Store, e FileEntry, report func(n int64)) (Header, uint64, error) {
	rc, err := s.Open(ctx, e.Name)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return Header{}, 0, fmt.Errorf("format: backup file %s is missing: %w", e.Name, err)
		}
		return Header{}, 0, fmt.Errorf("format: backup file %s: %w", e.Name, err)
	}
	defer rc.Close()
	pr := &progressReader{ctx: ctx, r: rc, h: sha256.New(), report: report}
	h, records, err := readAll(pr)
	if err != nil {
		if ctx.Err() != nil {
			return Header{}, 0, ctx.Err()
		}
		return Header{}, 0, fileErr(e, pr.n, err)
	}
	if pr.n != e.Bytes {
		return Header{}, 0, fileErr(e, pr.n, fmt.Errorf("%w: %d bytes, the manifest says %d", ErrCorrupt, pr.n, e.Bytes))
	}
	if sum := hex.EncodeToString(pr.h.Sum(nil)); sum != e.SHA256 {
		return Header{}, 0, fileErr(e, pr.n, fmt.Errorf("%w: SHA-256 %s, the manifest says %s", ErrCorrupt, sum, e.SHA256))
	}
	return h, records, nil
}

// readAll reads a backup file to its end and answers its header and
// record count.
func readAll(r io.Reader) (Header, uint64, error) {
	br, err := NewReader(r)
	if err != nil {
		return Header{}, 0, err
	}
	for {
		if _, err := br.Next(); errors.Is(err, io.EOF) {
			return br.Header(), br.Records(), nil
		} else if err != nil {
			return Header{}, 0, err
		}
	}
}

// fileErr words err, met verifying the file e names after reading n of
// its bytes, for an operator.
func fileErr(e FileEntry, n int64, err error) error {
	switch {
	case errors.Is(err, ErrTruncated):
		return fmt.Errorf("format: backup file %s is truncated (%d of %d bytes): %w", e.Name, n, e.Bytes, err)
	case errors.Is(err, ErrCorrupt):
		return fmt.Errorf("format: backup file %s was altered: %w", e.Name, err)
	default:
		return fmt.Errorf("format: backup file %s: %w", e.Name, err)
	}
}

// Verify checks every file of m (see VerifyFile), and that each holds the
// capture its manifest entry describes. progress, when not nil, is told
// the bytes verified so far and the total as reading goes.
func Verify(ctx context.Context, s store.Store, m Manifest, progress func(done, total int64)) error {
	type check struct {
		e    FileEntry
		want Header // Shard, Index and Since are checked for a shard only
		// records is the count the manifest records; -1 for the meta file.
		records int64
	}
	var checks []check
	for _, e := range m.Shards {
		want := Header{Kind: KindShard, BackupID: m.ID, ClusterID: m.ClusterID, Shard: e.Shard, Index: e.Index, Since: e.Since}
		checks = append(checks, check{e.FileEntry, want, e.Records})
	}
	checks = append(checks, check{m.Meta, Header{Kind: KindMeta, BackupID: m.ID, ClusterID: m.ClusterID}, -1})
	var done, total int64
	for _, c := range checks {
		total += c.e.Bytes
	}
	report := func(n int64) {
		if progress != nil {
			progress(done+n, total)
		}
	}
	for _, c := range checks {
		h, n, err := verifyFile(ctx, s, c.e, report)
		if err != nil {
			return err
		}
		if c.want.Kind == KindMeta {
			c.want.Shard, c.want.Index, c.want.Since = h.Shard, h.Index, h.Since
		}
		if h.Kind != c.want.Kind || h.BackupID != c.want.BackupID || h.ClusterID != c.want.ClusterID ||
			h.Shard != c.want.Shard || h.Index != c.want.Index || h.Since != c.want.Since {
			return fmt.Errorf("%w: backup file %s holds a %s capture (shard %d, index %d, since %d) of backup %s of cluster %q; "+
				"the manifest wants a %s capture (shard %d, index %d, since %d) of backup %s of cluster %q",
				ErrCorrupt, c.e.Name, h.Kind, h.Shard, h.Index, h.Since, h.BackupID, h.ClusterID,
				c.want.Kind, c.want.Shard, c.want.Index, c.want.Since, c.want.BackupID, c.want.ClusterID)
		}
		if c.records >= 0 && int64(n) != c.records {
			return fmt.Errorf("%w: backup file %s holds %d records, the manifest says %d", ErrCorrupt, c.e.Name, n, c.records)
		}
		done += c.e.Bytes
		report(0)
	}
	return nil
}
