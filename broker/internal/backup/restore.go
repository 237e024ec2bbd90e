package backup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/backup/store"
	"github.com/sundialmq/sundial/broker/internal/keys"
	"github.com/sundialmq/sundial/meta"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A restore, on the broker serving the RestoreBackup call:
//
//  1. reads the manifests in the source, picks the backup and its chain
//     (the full backup it builds on, and the incrementals between);
//  2. checks the cluster: no topics, and serving exactly the backup's
//     shards (their ids place partitions on the ring);
//  3. reads back every file of the chain and checks sizes and checksums,
//     before anything is written (a missing, truncated or altered file
//     stops it, named);
//  4. for each shard, proposes through the shard's leader a begin (into an
//     empty shard only), the records of its files in numbered chunks (the
//     latest full capture, then each incremental), and an end, after which
//     the shard's dispatcher reloads: what fell due while the cluster was
//     down is delivered at once, nothing before its due time, and a lease
//     taken before the backup is given up at its deadline, so its message
//     is delivered again (at least once);
//  5. installs the catalog (restore_catalog): topics, groups, settings,
//     tokens and roles. Clients see the topics from then on.
//
// The restore's id is the backup's, and every step is idempotent (a begin
// or chunk already applied answers OK), so a restore cut short resumes
// from the start when asked again with the same backup. Once the catalog
// is in, the same restore asked again answers done.

// restoreChunkBytes bounds the records of one restore proposal.
const restoreChunkBytes = 1 << 20

// ErrClusterHoldsData refuses a restore into a cluster with topics.
var ErrClusterHoldsData = errors.New("backup: the cluster holds data (it has topics): restore into a new cluster")

// ShardsMismatchError refuses a restore into a cluster that does not serve
// the backup's shards.
type ShardsMismatchError struct {
	Backup, Cluster []uint64
}

func (e *ShardsMismatchError) Error() string {
	return fmt.Sprintf("backup: the backup holds shards %v, this cluster serves %v: restoring to another shard count is not supported; "+
		"bootstrap a new cluster with %d shards (shards: in the broker config) and restore into it", e.Backup, e.Cluster, len(e.Backup))
}

// RestoreRefusedError is a shard's refusal of a restore step.
type RestoreRefusedError struct {
	Shard  uint64
	Reason string
}

func (e *RestoreRefusedError) Error() string {
	return fmt.Sprintf("backup: shard %d refused the restore: %s", e.Shard, e.Reason)
}

// MetaGroup is the meta group as the restore needs it (host.MetaClient).
type MetaGroup interface {
	ReadMeta(ctx context.Context) (*meta.State, error)
	ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error)
}

// ShardSteps proposes a restore step to a shard's leader, wherever it
// runs.
type ShardSteps interface {
	RestoreShard(ctx context.Context, req *brokerv1.RestoreShardRequest) error
}

// Restorer coordinates restores.
type Restorer struct {
	stores  *Stores
	meta    MetaGroup
	shards  ShardSteps
	log     *zap.Logger
	metrics *Metrics
}

// NewRestorer returns a Restorer.
func NewRestorer(stores *Stores, m MetaGroup, shards ShardSteps, log *zap.Logger, metrics *Metrics) *Restorer {
	return &Restorer{stores: stores, meta: m, shards: shards, log: log, metrics: metrics}
}

// Restore restores backup id (the newest when empty) from src, telling
// progress what it does.
func (r *Restorer) Restore(ctx context.Context, src, id string, progress func(*sundialv1.RestoreProgress) error) (err error) {
	var bytesDone int64
	defer func() {
		r.metrics.restored(err == nil, bytesDone)
		if err != nil {
			r.log.Warn("restore failed", zap.String("backup_id", id), zap.Error(err))
		}
	}()
	st, err := r.stores.Open(src)
	if err != nil {
		return err
	}
	all, err := format.ListManifests(ctx, st)
	if err != nil {
		return err
	}
	if id == "" {
		if len(all) == 0 {
			return fmt.Errorf("%w: no complete backup in %s", store.ErrNotFound, st)
		}
		id = all[len(all)-1].ID
	}
	chain, err := format.Chain(all, id)
	if err != nil {
		return err
	}
	target := chain[len(chain)-1]
	p := &sundialv1.RestoreProgress{BackupId: id, ShardsTotal: uint32(len(target.Shards))}
	for _, m := range chain {
		p.Chain = append(p.Chain, m.ID)
		p.BytesTotal += m.Bytes
	}
	state, err := r.meta.ReadMeta(ctx)
	if err != nil {
		return err
	}
	p.ClusterId = state.ClusterID
	if state.RestoredFrom == id {
		p.Phase, p.ShardsDone, p.BytesDone, p.Messages = "done", p.ShardsTotal, p.BytesTotal, target.Messages
		return progress(p)
	}
	if err := checkTarget(state, target); err != nil {
		return err
	}
	r.log.Info("restore started", zap.String("backup_id", id), zap.Strings("chain", p.Chain), zap.String("src", st.String()))

	p.Phase = "verify"
	if err := progress(p); err != nil {
		return err
	}
	for _, m := range chain {
		if err := format.Verify(ctx, st, m, func(done, _ int64) {}); err != nil {
			return err
		}
		p.BytesDone += m.Bytes
		if err := progress(p); err != nil {
			return err
		}
	}

	plan, err := format.ShardPlan(chain)
	if err != nil {
		return err
	}
	p.Phase, p.BytesDone = "shards", 0
	if err := progress(p); err != nil {
		return err
	}
	shards := slices.Sorted(maps.Keys(plan))
	// Every begin first: a shard that holds data refuses before any
	// record is written anywhere.
	for _, shard := range shards {
		if err := r.shards.RestoreShard(ctx, &brokerv1.RestoreShardRequest{ShardId: shard, RestoreId: id, Begin: true}); err != nil {
			return err
		}
	}
	for _, shard := range shards {
		n, err := r.restoreShard(ctx, st, shard, id, plan[shard], func(b int64) error {
			p.BytesDone += b
			bytesDone += b
			return progress(p)
		})
		if err != nil {
			return err
		}
		p.Messages += n
		p.ShardsDone++
		if err := progress(p); err != nil {
			return err
		}
	}

	p.Phase = "catalog"
	if err := progress(p); err != nil {
		return err
	}
	cat, err := ReadCatalog(ctx, st, target.Meta.Name)
	if err != nil {
		return err
	}
	code, _, err := r.meta.ProposeMeta(ctx, &meta.Command{Op: meta.OpRestoreCatalog, Name: id, Catalog: cat})
	if err != nil {
		return err
	}
	if code != meta.ResultOK {
		return ErrClusterHoldsData
	}
	r.log.Info("restore done", zap.String("backup_id", id), zap.Int64("messages", p.Messages), zap.Int("topics", len(cat.Topics)))
	p.Phase = "done"
	return progress(p)
}

// checkTarget refuses a cluster with topics or other shards than the
// backup's.
func checkTarget(state *meta.State, target format.Manifest) error {
	if len(state.Topics) > 0 {
		return ErrClusterHoldsData
	}
	var want, have []uint64
	for _, s := range target.Shards {
		want = append(want, s.Shard)
	}
	for _, id := range state.ShardIDs() {
		if state.Shards[id].State != meta.ShardStarting {
			have = append(have, uint64(id))
		}
	}
	slices.Sort(want)
	if !slices.Equal(want, have) {
		return &ShardsMismatchError{Backup: want, Cluster: have}
	}
	if target.StateFormat > keys.FormatVersion {
		return &format.VersionError{What: "shard state", Found: int(target.StateFormat), Known: int(keys.FormatVersion)}
	}
	return nil
}

// restoreShard writes the records of files (in order) into shard in
// numbered chunks, then ends the shard's restore; it answers the message
// bodies written.
func (r *Restorer) restoreShard(ctx context.Context, st store.Store, shard uint64, id string, files []format.ShardEntry, done func(bytes int64) error) (int64, error) {
	var seq uint64
	var messages int64
	for _, f := range files {
		rc, err := st.Open(ctx, f.Name)
		if err != nil {
			return 0, err
		}
		rd, err := format.NewReader(rc)
		if err != nil {
			rc.Close()
			return 0, fmt.Errorf("backup: %s: %w", f.Name, err)
		}
		var chunk []*brokerv1.RestoreRecord
		size := 0
		flush := func() error {
			if len(chunk) == 0 {
				return nil
			}
			seq++
			if err := r.shards.RestoreShard(ctx, &brokerv1.RestoreShardRequest{ShardId: shard, RestoreId: id, Seq: seq, Records: chunk}); err != nil {
				return err
			}
			err := done(int64(size))
			chunk, size = nil, 0
			return err
		}
		for err == nil {
			var rec format.Record
			rec, err = rd.Next()
			if err != nil {
				break
			}
			chunk = append(chunk, &brokerv1.RestoreRecord{Delete: rec.Op == format.OpDelete, Key: bytes.Clone(rec.Key), Value: bytes.Clone(rec.Value)})
			size += len(rec.Key) + len(rec.Value) + 8
			if rec.Op == format.OpSet && keys.IsMessage(rec.Key) {
				messages++
			}
			if size >= restoreChunkBytes {
				err = flush()
			}
		}
		rc.Close()
		if !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("backup: %s: %w", f.Name, err)
		}
		if err := flush(); err != nil {
			return 0, err
		}
	}
	if err := r.shards.RestoreShard(ctx, &brokerv1.RestoreShardRequest{ShardId: shard, RestoreId: id, End: true}); err != nil {
		return 0, err
	}
	return messages, nil
}
