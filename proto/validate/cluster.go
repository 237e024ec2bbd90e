package validate

import (
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TransferLeader checks a TransferLeader request's shape: a shard must be
// named (0 is no shard). Whether the shard and the target
// node exist is the broker's to answer (NotFound, FailedPrecondition).
func TransferLeader(req *sundialv1.TransferLeaderRequest) []apierr.FieldViolation {
	if req.GetShardId() == 0 {
		return violation("shard_id", "required: the id of the shard whose leadership moves")
	}
	return nil
}

// MaxRebalanceOperations caps RebalanceRequest.max_operations.
const MaxRebalanceOperations = 1000

// Rebalance checks a Rebalance request: max_operations is at most
// MaxRebalanceOperations (0 is the planner's default).
func Rebalance(req *sundialv1.RebalanceRequest) []apierr.FieldViolation {
	if req.GetMaxOperations() > MaxRebalanceOperations {
		return violation("max_operations", "at most 1000 operations a plan (0: the default, 16)")
	}
	return nil
}
