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
