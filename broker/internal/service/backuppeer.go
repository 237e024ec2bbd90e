package service

import (
	"context"
	"fmt"
	"time"

	"github.com/sundialmq/sundial/broker/internal/backup"
	"github.com/sundialmq/sundial/broker/internal/fsm/fsmpb"
	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/proto/apierr"
	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
)

// The peer calls of backups and restores (peer.proto): each is made on the
// shard's leader, so its proposals go through the leader's proposer.

// leadingShard answers the handles of shard if this broker leads it, else
// the error a caller follows (NotLeader naming the leader, or WrongShard).
func (p *Peer) leadingShard(shard uint64) (*host.Leading, error) {
	if shard == 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "shard_id", Description: "must be set"})
	}
	lead, node, addr, hosted := p.replicas.LeaderInfo(shard)
	if !hosted {
		return nil, apierr.WrongShard(shard, p.meta.Meta().Version)
	}
	if lead == nil {
		return nil, apierr.NotLeader(shard, node, addr)
	}
	return lead, nil
}

// CaptureShard captures a shard this broker leads for a backup.
func (p *Peer) CaptureShard(ctx context.Context, req *brokerv1.CaptureShardRequest) (*brokerv1.CaptureShardResponse, error) {
	var bad []apierr.FieldViolation
	if req.GetBackupId() == "" {
		bad = append(bad, apierr.FieldViolation{Field: "backup_id", Description: "must be set"})
	}
	if req.GetDest() == "" {
		bad = append(bad, apierr.FieldViolation{Field: "dest", Description: "must be set"})
	}
	if len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	lead, err := p.leadingShard(req.GetShardId())
	if err != nil {
		return nil, err
	}
	return p.capturer.Capture(ctx, lead.Proposer, req)
}

// TrimJournal trims the change journal of a shard this broker leads.
func (p *Peer) TrimJournal(ctx context.Context, req *brokerv1.TrimJournalRequest) (*brokerv1.TrimJournalResponse, error) {
	lead, err := p.leadingShard(req.GetShardId())
	if err != nil {
		return nil, err
	}
	if req.GetThrough() == 0 {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "through", Description: "must be set"})
	}
	out, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Journal{Journal: &fsmpb.Journal{TrimThrough: req.GetThrough()}}})
	if err != nil {
		return nil, err
	}
	return &brokerv1.TrimJournalResponse{Since: out.GetJournal().GetSince()}, nil
}

// RestoreShard proposes one restore step to a shard this broker leads.
func (p *Peer) RestoreShard(ctx context.Context, req *brokerv1.RestoreShardRequest) (*brokerv1.RestoreShardResponse, error) {
	if req.GetRestoreId() == "" {
		return nil, apierr.InvalidArgument(apierr.FieldViolation{Field: "restore_id", Description: "must be set"})
	}
	lead, err := p.leadingShard(req.GetShardId())
	if err != nil {
		return nil, err
	}
	r := &fsmpb.Restore{RestoreId: req.GetRestoreId(), Begin: req.GetBegin(), Seq: req.GetSeq(), End: req.GetEnd(), NowMs: time.Now().UnixMilli()}
	for _, rec := range req.GetRecords() {
		op := fsmpb.RestoreOp_RESTORE_OP_SET
		if rec.GetDelete() {
			op = fsmpb.RestoreOp_RESTORE_OP_DELETE
		}
		r.Records = append(r.Records, &fsmpb.RestoreRecord{Op: op, Key: rec.GetKey(), Value: rec.GetValue()})
	}
	out, err := lead.Proposer.Propose(ctx, &fsmpb.Command{Kind: &fsmpb.Command_Restore{Restore: r}})
	if err != nil {
		return nil, err
	}
	if code := out.GetRestore(); code != fsmpb.RestoreCode_RESTORE_CODE_OK {
		return nil, &backup.RestoreRefusedError{Shard: req.GetShardId(), Reason: restoreReason(code)}
	}
	return &brokerv1.RestoreShardResponse{}, nil
}

// restoreReason says what a shard's restore refusal means to an operator.
func restoreReason(code fsmpb.RestoreCode) string {
	switch code {
	case fsmpb.RestoreCode_RESTORE_CODE_NOT_EMPTY:
		return "it holds data (restore into a new cluster)"
	case fsmpb.RestoreCode_RESTORE_CODE_OTHER_RESTORE:
		return "another restore is in progress on it (finish that one: run the same restore again)"
	case fsmpb.RestoreCode_RESTORE_CODE_OUT_OF_ORDER:
		return "a chunk came out of order"
	case fsmpb.RestoreCode_RESTORE_CODE_BAD_RECORD:
		return "a record is not shard data"
	}
	return fmt.Sprintf("code %v", code)
}
