package service

import (
	"context"
	"errors"

	"github.com/lni/dragonboat/v4"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/broker/internal/proposer"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
)

// toStatus turns any error into a gRPC status error: status errors pass
// as they are, meta's typed answers become NotFound, AlreadyExists,
// FailedPrecondition (a topic being deleted, or its partitions handing
// over) and Aborted (a topic busy with
// another operation: retry),
// a transfer to a node without a replica FailedPrecondition, a transfer
// asked of a follower NotLeader naming the leader,
// context and Dragonboat errors their codes, anything else Internal.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	var se interface{ GRPCStatus() *status.Status }
	var notFound *meta.NotFoundError
	var exists *meta.ExistsError
	var deleting *meta.BeingDeletedError
	var busy *meta.BusyError
	var handingOver *meta.HandingOverError
	var notLeader *host.NotShardLeaderError
	switch {
	case errors.As(err, &se):
		return se.GRPCStatus().Err()
	case errors.As(err, &notFound):
		return status.Error(codes.NotFound, notFound.Error())
	case errors.As(err, &exists):
		return status.Error(codes.AlreadyExists, exists.Error())
	case errors.As(err, &deleting):
		return status.Error(codes.FailedPrecondition, deleting.Error())
	case errors.As(err, &busy):
		return status.Error(codes.Aborted, busy.Error())
	case errors.As(err, &handingOver):
		return status.Error(codes.FailedPrecondition, handingOver.Error())
	case errors.As(err, &notLeader):
		return apierr.NotLeader(notLeader.Shard, notLeader.Leader, notLeader.LeaderAddr)
	case errors.Is(err, host.ErrNoReplicaOnNode):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, dragonboat.ErrTimeoutTooSmall), errors.Is(err, dragonboat.ErrDeadlineNotSet):
		return status.Error(codes.DeadlineExceeded, "too little time left for a raft round trip: "+err.Error())
	case errors.Is(err, dragonboat.ErrTimeout):
		return status.Error(codes.Unavailable, "raft proposal timed out: "+err.Error())
	case dragonboat.IsTempError(err),
		errors.Is(err, dragonboat.ErrClosed),
		errors.Is(err, dragonboat.ErrShardNotFound),
		errors.Is(err, dragonboat.ErrShardClosed),
		errors.Is(err, dragonboat.ErrRejected),
		errors.Is(err, dragonboat.ErrAborted),
		errors.Is(err, proposer.ErrClosed):
		return status.Error(codes.Unavailable, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}
