package service

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/sundialmq/sundial/broker/internal/host"
	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// Defaults of CreateJoinToken.
const (
	defaultJoinTokenExpiry = time.Hour
	defaultJoinTokenUses   = 1
)

// joinUse checks the join token of req against this broker's meta state,
// before anything else of the join: a join without a valid token is
// answered PermissionDenied saying only why the token was refused
// (counted and logged by the gate), never the node id, cluster id or
// leader. checked is false when the token is unknown here but may be
// known to the meta leader (created an instant ago: this broker's state
// lags): the leader's entry decides. Without Options.RequireJoinToken a
// join without a token is admitted (nil use); one with a token still
// needs a good one.
func (c *Cluster) joinUse(ctx context.Context, req *sundialv1.JoinClusterRequest) (use *meta.JoinUse, checked bool, err error) {
	refuse := func(reason, id string) error {
		c.opts.Gate.Refuse(ctx, reason, zap.String("method", "JoinCluster"), zap.String("join_token_id", id))
		return &host.JoinDeniedError{Reason: reason}
	}
	token := req.GetJoinToken()
	if token == "" {
		if !c.opts.RequireJoinToken {
			return nil, true, nil
		}
		return nil, false, refuse(meta.DeniedNoToken, "")
	}
	id, secret, err := meta.ParseJoinToken(token)
	if err != nil {
		return nil, false, refuse(meta.DeniedBad, "")
	}
	use = &meta.JoinUse{ID: id, Hash: meta.HashSecret(secret), Required: c.opts.RequireJoinToken}
	st := c.meta.Meta()
	if _, known := st.JoinTokens[id]; !known {
		// The cached state can lag a token made a moment ago (even on the
		// meta leader): read the meta group before calling it unknown.
		if fresh, err := c.meta.ReadMeta(ctx); err == nil {
			st = fresh
		}
	}
	var retriedBy meta.NodeID
	for _, nid := range st.NodeIDs() {
		if n := st.Nodes[nid]; n.Incarnation == req.GetIncarnation() && (req.GetNodeId() == 0 || req.GetNodeId() == uint64(nid)) {
			retriedBy = nid
		}
	}
	switch reason := st.CheckJoinToken(use, retriedBy, c.opts.Now().UnixMilli()); reason {
	case "":
		return use, true, nil
	case meta.DeniedBad:
		if _, known := st.JoinTokens[id]; !known && c.meta.MetaLeader() != c.meta.NodeID() {
			return use, false, nil
		}
		return nil, false, refuse(reason, id)
	default:
		return nil, false, refuse(reason, id)
	}
}

// joinRefusal is what a joining broker is told of a refused token.
func joinRefusal(reason string) string {
	why := map[string]string{
		meta.DeniedNoToken: "no join token given",
		meta.DeniedBad:     "the join token is not one of this cluster's",
		meta.DeniedExpired: "the join token has expired",
		meta.DeniedSpent:   "the join token has admitted all the brokers it may",
	}[reason]
	if why == "" {
		why = "the join token was refused"
	}
	return "join refused: " + why + "; create one with shardctl join-token create and give it to the joining broker with --join-token-file"
}

// CreateJoinToken makes a token and stores its hash in the meta group;
// the secret is answered once.
func (c *Cluster) CreateJoinToken(ctx context.Context, req *sundialv1.CreateJoinTokenRequest) (*sundialv1.CreateJoinTokenResponse, error) {
	if bad := validate.CreateJoinToken(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	expires := time.Duration(req.GetExpiresInMs()) * time.Millisecond
	if expires == 0 {
		expires = defaultJoinTokenExpiry
	}
	uses := int(req.GetUses())
	if uses == 0 {
		uses = defaultJoinTokenUses
	}
	id, secret, token, err := meta.NewJoinToken()
	if err != nil {
		return nil, err
	}
	now := c.opts.Now()
	t := &meta.JoinToken{ID: id, Hash: meta.HashSecret(secret), ExpiresMs: now.Add(expires).UnixMilli(), Uses: uses}
	if err := c.meta.CreateJoinToken(ctx, t); err != nil {
		return nil, err
	}
	t.CreatedMs = now.UnixMilli()
	c.log.Info("join token created", zap.String("join_token_id", id), zap.Time("expires", time.UnixMilli(t.ExpiresMs)), zap.Int("uses", uses))
	return &sundialv1.CreateJoinTokenResponse{Token: joinTokenProto(t, now), Secret: token}, nil
}

// ListJoinTokens answers the tokens of the meta state after a
// linearizable read.
func (c *Cluster) ListJoinTokens(ctx context.Context, _ *sundialv1.ListJoinTokensRequest) (*sundialv1.ListJoinTokensResponse, error) {
	st, err := c.meta.ReadMeta(ctx)
	if err != nil {
		return nil, err
	}
	now := c.opts.Now()
	resp := &sundialv1.ListJoinTokensResponse{}
	for _, id := range st.JoinTokenIDs() {
		resp.Tokens = append(resp.Tokens, joinTokenProto(st.JoinTokens[id], now))
	}
	return resp, nil
}

// RevokeJoinToken deletes a token from the meta group.
func (c *Cluster) RevokeJoinToken(ctx context.Context, req *sundialv1.RevokeJoinTokenRequest) (*sundialv1.RevokeJoinTokenResponse, error) {
	if bad := validate.RevokeJoinToken(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	if err := c.meta.RevokeJoinToken(ctx, req.GetId()); err != nil {
		return nil, err
	}
	c.log.Info("join token revoked", zap.String("join_token_id", req.GetId()))
	return &sundialv1.RevokeJoinTokenResponse{}, nil
}

func joinTokenProto(t *meta.JoinToken, now time.Time) *sundialv1.JoinToken {
	p := &sundialv1.JoinToken{
		Id: t.ID, CreatedAtMs: t.CreatedMs, ExpiresAtMs: t.ExpiresMs, Uses: uint32(t.Uses),
		Expired: t.Expired(now.UnixMilli()), Spent: t.Spent(),
	}
	for _, n := range t.Nodes {
		p.NodeIds = append(p.NodeIds, uint64(n))
	}
	return p
}
