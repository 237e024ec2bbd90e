package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sundialmq/sundial/meta"
)

// ErrNoJoinToken is the error of a revoke naming no join token.
var ErrNoJoinToken = errors.New("host: no such join token")

// JoinDeniedError is a join refused for its token (meta.CheckJoinToken):
// Reason is one of meta's Denied reasons.
type JoinDeniedError struct{ Reason string }

func (e *JoinDeniedError) Error() string {
	return fmt.Sprintf("host: join refused: %s", e.Reason)
}

// deniedReason reads the reason a ResultDenied join_node answered.
func deniedReason(data []byte) string {
	var reason string
	if json.Unmarshal(data, &reason) != nil || reason == "" {
		return meta.DeniedBad
	}
	return reason
}

// CreateJoinToken stores t (its ID and Hash set) in the meta group; the
// entry stamps its creation time.
func (m *MetaClient) CreateJoinToken(ctx context.Context, t *meta.JoinToken) error {
	code, _, err := m.ProposeMeta(ctx, &meta.Command{Op: meta.OpCreateJoinToken, JoinToken: t})
	if err != nil {
		return err
	}
	if code != meta.ResultOK {
		return fmt.Errorf("host: create_join_token answered %d", code)
	}
	return nil
}

// RevokeJoinToken deletes join token id from the meta group.
func (m *MetaClient) RevokeJoinToken(ctx context.Context, id string) error {
	code, _, err := m.ProposeMeta(ctx, &meta.Command{Op: meta.OpRevokeJoinToken, Name: id})
	if err != nil {
		return err
	}
	if code == meta.ResultNotFound {
		return fmt.Errorf("%w: %s", ErrNoJoinToken, id)
	}
	return nil
}
