package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/backup/store"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/meta"
)

// catalogKey is the one record of a catalog file; its value is the
// catalog as JSON (meta.Catalog).
const catalogKey = "catalog"

// WriteCatalog writes the catalog file of backup id: one record holding
// cat, in the backup file format (so it is checksummed and versioned like
// the shards' files).
func WriteCatalog(ctx context.Context, st store.Store, id string, cat *meta.Catalog, nowMs int64) (meta.BackupFile, error) {
	v, err := json.Marshal(cat)
	if err != nil {
		return meta.BackupFile{}, err
	}
	var buf bytes.Buffer
	w, err := format.NewWriter(&buf, format.Header{Kind: format.KindMeta, BackupID: id, ClusterID: cat.ClusterID, StateFormat: keys.FormatVersion, CreatedUnixMs: nowMs})
	if err != nil {
		return meta.BackupFile{}, err
	}
	if err := w.Set([]byte(catalogKey), v); err != nil {
		return meta.BackupFile{}, err
	}
	sum, err := w.Close()
	if err != nil {
		return meta.BackupFile{}, err
	}
	name := format.MetaFileName(id)
	if err := st.Put(ctx, name, bytes.NewReader(buf.Bytes()), sum.Bytes); err != nil {
		return meta.BackupFile{}, fmt.Errorf("backup: upload %s: %w", name, err)
	}
	return meta.BackupFile{Name: name, Bytes: sum.Bytes, SHA256: sum.SHA256}, nil
}

// ReadCatalog reads the catalog file name.
func ReadCatalog(ctx context.Context, st store.Store, name string) (*meta.Catalog, error) {
	rc, err := st.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	r, err := format.NewReader(rc)
	if err != nil {
		return nil, fmt.Errorf("backup: %s: %w", name, err)
	}
	var cat *meta.Catalog
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("backup: %s: %w", name, err)
		}
		if string(rec.Key) == catalogKey && rec.Op == format.OpSet {
			cat = &meta.Catalog{}
			if err := json.Unmarshal(rec.Value, cat); err != nil {
				return nil, fmt.Errorf("backup: %s: catalog: %w", name, err)
			}
		}
	}
	if cat == nil {
		return nil, fmt.Errorf("backup: %s holds no catalog", name)
	}
	return cat, nil
}

// Manifest builds the manifest of a run whose catalog and every shard are
// captured.
func Manifest(run *meta.BackupRun, clusterID string, nowMs int64) (format.Manifest, error) {
	if run.Catalog == nil {
		return format.Manifest{}, fmt.Errorf("backup: run %s has no catalog file", run.ID)
	}
	m := format.Manifest{
		Format: format.ManifestFormat, ID: run.ID, Parent: run.Parent, Kind: run.Kind, ClusterID: clusterID,
		CreatedUnixMs: run.StartedAtMs, FinishedUnixMs: nowMs, StateFormat: keys.FormatVersion, ShardCount: len(run.Shards),
		Meta: format.FileEntry{Name: run.Catalog.Name, Bytes: run.Catalog.Bytes, SHA256: run.Catalog.SHA256},
	}
	m.Bytes = run.Catalog.Bytes
	for _, id := range run.Shards {
		c := run.Captures[id]
		if c == nil {
			return format.Manifest{}, fmt.Errorf("backup: run %s has no capture of shard %d", run.ID, id)
		}
		m.Shards = append(m.Shards, format.ShardEntry{
			Shard: uint64(id), Index: c.Index, Since: c.Since, Kind: c.Kind,
			FileEntry: format.FileEntry{Name: c.Name, Bytes: c.Bytes, SHA256: c.SHA256},
			Records:   c.Records, Messages: c.Messages,
		})
		m.Bytes += c.Bytes
		m.Messages += c.Messages
	}
	return m, nil
}

// WriteManifest writes m, last: the backup exists from then on.
func WriteManifest(ctx context.Context, st store.Store, m format.Manifest) error {
	b, err := format.MarshalManifest(m)
	if err != nil {
		return err
	}
	name := format.ManifestName(m.ID)
	if err := st.Put(ctx, name, bytes.NewReader(b), int64(len(b))); err != nil {
		return fmt.Errorf("backup: upload %s: %w", name, err)
	}
	return nil
}

// Newest returns the newest complete backup in st; ok false when none.
func Newest(ctx context.Context, st store.Store) (m format.Manifest, ok bool, err error) {
	all, err := format.ListManifests(ctx, st)
	if err != nil || len(all) == 0 {
		return format.Manifest{}, false, err
	}
	return all[len(all)-1], true, nil
}

// Delete deletes backup id's files from st, its manifest first, so a
// backup is never listed half deleted; it answers the files deleted
// (ErrNotFound wrapped when there were none).
func Delete(ctx context.Context, st store.Store, id string) (int, error) {
	files, err := st.List(ctx, format.BackupDir(id))
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("%w: no backup %s in %s", store.ErrNotFound, id, st)
	}
	manifest := format.ManifestName(id)
	if err := st.Delete(ctx, manifest); err != nil {
		return 0, err
	}
	n := 0
	for _, f := range files {
		if f.Name != manifest {
			if err := st.Delete(ctx, f.Name); err != nil {
				return n, err
			}
		}
		n++
	}
	return n, nil
}
