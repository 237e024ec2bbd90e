package backup

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/sundialmq/sundial/broker/internal/backup/format"
	"github.com/sundialmq/sundial/broker/internal/fsm"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/keys"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// Proposer proposes a command to a shard this broker leads and answers
// its outcome once applied (proposer.Proposer).
type Proposer interface {
	Propose(ctx context.Context, cmd *fsmpb.Command) (*fsmpb.Outcome, error)
}

// Capturer writes shard captures of this broker's state DB.
type Capturer struct {
	db *pebble.DB
	// spool is the directory capture files are written to before their
	// upload (in the data dir, so a capture never fills another disk).
	spool  string
	stores *Stores
	now    func() time.Time
}

// NewCapturer returns a Capturer of db spooling in dir.
func NewCapturer(db *pebble.DB, dir string, stores *Stores) *Capturer {
	return &Capturer{db: db, spool: dir, stores: stores, now: time.Now}
}

// Capture captures the shard lead proposes to, as CaptureShardRequest
// asks (see Peer.CaptureShard in peer.proto), and uploads the file.
func (c *Capturer) Capture(ctx context.Context, lead Proposer, req *brokerv1.CaptureShardRequest) (*brokerv1.CaptureShardResponse, error) {
	start := c.now()
	st, err := c.stores.Open(req.GetDest())
	if err != nil {
		return nil, err
	}
	out, err := lead.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Journal{Journal: &fsmpb.Journal{}}})
	if err != nil {
		return nil, fmt.Errorf("backup: turn the change journal of shard %d on: %w", req.GetShardId(), err)
	}
	since := req.GetSince()
	if j := out.GetJournal(); since != 0 && (j.GetSince() == 0 || j.GetSince() > since) {
		since = 0 // the journal does not reach back so far: capture it whole
	}
	snap := c.db.NewSnapshot()
	defer snap.Close()
	if err := os.MkdirAll(c.spool, 0o700); err != nil {
		return nil, fmt.Errorf("backup: spool dir: %w", err)
	}
	f, err := os.CreateTemp(c.spool, fmt.Sprintf("shard-%d-*.sdb", req.GetShardId()))
	if err != nil {
		return nil, fmt.Errorf("backup: spool file: %w", err)
	}
	defer func() {
		f.Close()
		os.Remove(f.Name())
	}()
	captured, sum, err := c.write(ctx, snap, f, req, since)
	if errors.Is(err, fsm.ErrJournalGap) && since != 0 {
		// The journal changed between the proposal and the snapshot (it
		// overflowed): capture the shard whole.
		if _, err := f.Seek(0, 0); err != nil {
			return nil, err
		}
		if err := f.Truncate(0); err != nil {
			return nil, err
		}
		captured, sum, err = c.write(ctx, snap, f, req, 0)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return nil, err
	}
	name := format.ShardFileName(req.GetBackupId(), req.GetShardId())
	if err := st.Put(ctx, name, f, sum.Bytes); err != nil {
		return nil, fmt.Errorf("backup: upload %s: %w", name, err)
	}
	kind := "full"
	if captured.Since != 0 {
		kind = "incremental"
	}
	c.stores.metrics.captured(kind, sum.Bytes, c.now().Sub(start))
	return &brokerv1.CaptureShardResponse{
		Index: captured.Index, Since: captured.Since, Kind: kind, Name: name,
		Bytes: sum.Bytes, Sha256: sum.SHA256, Records: int64(captured.Records), Messages: int64(captured.Messages),
	}, nil
}

// write captures the shard in snap into f: the header, the records, the end.
func (c *Capturer) write(ctx context.Context, snap *pebble.Snapshot, f *os.File, req *brokerv1.CaptureShardRequest, since uint64) (fsm.Captured, format.Summary, error) {
	bw := bufio.NewWriterSize(f, 256<<10)
	var w *format.Writer
	open := func(index uint64) (fsm.Sink, error) {
		var err error
		w, err = format.NewWriter(bw, format.Header{
			Kind: format.KindShard, BackupID: req.GetBackupId(), ClusterID: req.GetClusterId(),
			Shard: req.GetShardId(), Index: index, Since: since,
			StateFormat: keys.FormatVersion, CreatedUnixMs: c.now().UnixMilli(),
		})
		return w, err
	}
	captured, err := fsm.Capture(snap, req.GetShardId(), since, open, ctx.Done())
	if err != nil {
		return captured, format.Summary{}, fmt.Errorf("backup: capture shard %d: %w", req.GetShardId(), err)
	}
	sum, err := w.Close()
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	return captured, sum, err
}
