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

// StatusOf is the gRPC status the Boundary answers for err, nil for nil:
// the broker's one translation of domain errors. Handlers return their
// errors as they are and the Boundary alone applies it; call it yourself
// only where an error leaves the broker some other way than a handler's
// return (today: the code label of the publish-errors metric), so that it
// carries the code a client would see.
//
// Status errors pass as they are (a status of code Unknown, made without a
// code, becomes Internal); meta's typed answers become NotFound,
// AlreadyExists, FailedPrecondition (a topic being deleted, or its
// partitions handing over), Aborted (a topic busy with another
// operation: retry) and ResourceExhausted (past a cap on topics or groups,
// without RetryInfo: the same create fails again); a transfer to a node without a replica
// FailedPrecondition, a transfer asked of a follower NotLeader naming the
// leader; Join's refusals AlreadyExists (a taken node id),
// FailedPrecondition on cluster_id (another cluster's data dir) and
// Unavailable (a cluster not bootstrapped yet: retry later); context and
// Dragonboat errors their codes; anything else Internal.
func StatusOf(err error) *status.Status {
	if err == nil {
		return nil
	}
	st := translate(err)
	if st.Code() == codes.Unknown {
		return status.New(codes.Internal, st.Message())
	}
	return st
}

func translate(err error) *status.Status {
	var se interface{ GRPCStatus() *status.Status }
	var notFound *meta.NotFoundError
	var exists *meta.ExistsError
	var deleting *meta.BeingDeletedError
	var busy *meta.BusyError
	var handingOver *meta.HandingOverError
	var overLimit *meta.OverLimitError
	var notLeader *host.NotShardLeaderError
	var joinDenied *host.JoinDeniedError
	switch {
	case errors.As(err, &se):
		return se.GRPCStatus()
	case errors.As(err, &notFound):
		return status.New(codes.NotFound, notFound.Error())
	case errors.As(err, &exists):
		return status.New(codes.AlreadyExists, exists.Error())
	case errors.As(err, &deleting):
		return status.New(codes.FailedPrecondition, deleting.Error())
	case errors.As(err, &busy):
		return status.New(codes.Aborted, busy.Error())
	case errors.As(err, &handingOver):
		return status.New(codes.FailedPrecondition, handingOver.Error())
	case errors.As(err, &overLimit):
		return status.New(codes.ResourceExhausted, overLimit.Error())
	case errors.As(err, &notLeader):
		return status.Convert(apierr.NotLeader(notLeader.Shard, notLeader.Leader, notLeader.LeaderAddr))
	case errors.Is(err, host.ErrNoReplicaOnNode):
		return status.New(codes.FailedPrecondition, err.Error())
	case errors.Is(err, host.ErrNodeIDTaken):
		return status.New(codes.AlreadyExists, err.Error())
	case errors.Is(err, host.ErrOtherCluster):
		return status.Convert(apierr.FailedPrecondition(apierr.FieldViolation{Field: "cluster_id", Description: err.Error()}))
	case errors.As(err, &joinDenied):
		return status.New(codes.PermissionDenied, joinRefusal(joinDenied.Reason))
	case errors.Is(err, host.ErrNoJoinToken):
		return status.New(codes.NotFound, err.Error())
	case errors.Is(err, host.ErrNotBootstrapped):
		return status.New(codes.Unavailable, err.Error())
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, dragonboat.ErrTimeoutTooSmall), errors.Is(err, dragonboat.ErrDeadlineNotSet):
		return status.New(codes.DeadlineExceeded, "too little time left for a raft round trip: "+err.Error())
	case errors.Is(err, dragonboat.ErrTimeout):
		return status.New(codes.Unavailable, "raft proposal timed out: "+err.Error())
	case dragonboat.IsTempError(err),
		errors.Is(err, dragonboat.ErrClosed),
		errors.Is(err, dragonboat.ErrShardNotFound),
		errors.Is(err, dragonboat.ErrShardClosed),
		errors.Is(err, dragonboat.ErrRejected),
		errors.Is(err, dragonboat.ErrAborted),
		errors.Is(err, proposer.ErrClosed):
		return status.New(codes.Unavailable, err.Error())
	}
	if st, ok := backupStatus(err); ok {
		return st
	}
	return status.New(codes.Internal, err.Error())
}
