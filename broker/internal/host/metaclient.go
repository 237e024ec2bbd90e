package host

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lni/dragonboat/v4"
	"go.uber.org/zap"

	"github.com/sundialmq/sundial/meta"
)

// MetaClient is this node's way to the meta group, through its meta
// replica: the meta state as last applied here (Meta), linearizable reads
// and proposals, the group's leader and membership, and joins (join.go).
//
// The host's loop goroutine stores each meta state it reads (store); any
// goroutine reads and proposes. Proposals made here, and every apply of
// the meta replica, wake the host's loop (applied).
type MetaClient struct {
	nh   *dragonboat.NodeHost
	self uint64
	now  func() time.Time
	log  *zap.Logger

	state   atomic.Pointer[meta.State]
	applied chan struct{} // signalled on a meta change; the host's loop waits on it
}

func newMetaClient(self uint64, now func() time.Time, log *zap.Logger) *MetaClient {
	m := &MetaClient{self: self, now: now, log: log, applied: make(chan struct{}, 1)}
	m.state.Store(meta.NewState())
	return m
}

// metaTimeout bounds meta proposals and reads whose context has no deadline
// (Dragonboat requires one).
const metaTimeout = 5 * time.Second

func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, metaTimeout)
}

// NodeID is this broker's node id.
func (m *MetaClient) NodeID() uint64 { return m.self }

// Meta is the newest meta state this node has seen; never modify it.
func (m *MetaClient) Meta() *meta.State { return m.state.Load() }

// store records st as the newest meta state and answers the one before.
func (m *MetaClient) store(st *meta.State) *meta.State { return m.state.Swap(st) }

// signal wakes the host's loop to read the meta state again.
func (m *MetaClient) signal() {
	select {
	case m.applied <- struct{}{}:
	default:
	}
}

// ProposeMeta commits a meta command and returns its result.
func (m *MetaClient) ProposeMeta(ctx context.Context, c *meta.Command) (uint64, []byte, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	c.NowMs = m.now().UnixMilli()
	res, err := m.nh.SyncPropose(ctx, m.nh.GetNoOPSession(meta.ShardID), c.Encode())
	if err != nil {
		return 0, nil, err
	}
	m.signal()
	return res.Value, res.Data, nil
}

// propose is the host's own proposal (a registration, a step done here, a
// hand-over sealed): bounded by 3s and only logged when it fails, since
// the host's loop proposes it again while it is still needed.
func (m *MetaClient) propose(ctx context.Context, c *meta.Command) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c.NowMs = m.now().UnixMilli()
	if _, err := m.nh.SyncPropose(ctx, m.nh.GetNoOPSession(meta.ShardID), c.Encode()); err != nil {
		m.log.Debug("meta proposal not committed yet", zap.String("op", string(c.Op)), zap.Error(err))
	}
}

// metaReadTryTimeout bounds one try of a linearizable meta read: a read
// index request that reached a leader as it died is lost, and Dragonboat
// answers it only at its deadline (a caller with minutes left waited them
// all); the next try reaches the leader elected meanwhile.
const metaReadTryTimeout = 3 * time.Second

// ReadMeta answers the meta state after a linearizable read, trying again
// (each try bounded by metaReadTryTimeout) while ctx allows and the read
// times out or meets a temporary error.
func (m *MetaClient) ReadMeta(ctx context.Context) (*meta.State, error) {
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	for {
		tctx, tcancel := context.WithTimeout(ctx, metaReadTryTimeout)
		v, err := m.nh.SyncRead(tctx, meta.ShardID, meta.Query{})
		tcancel()
		if err == nil {
			return v.(*meta.State), nil
		}
		if ctx.Err() != nil || errors.Is(err, dragonboat.ErrClosed) || (!errors.Is(err, dragonboat.ErrTimeout) && !dragonboat.IsTempError(err)) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MetaLeader is the node id leading the meta group, 0 if unknown.
func (m *MetaClient) MetaLeader() uint64 {
	leader, _, valid, err := m.nh.GetLeaderID(meta.ShardID)
	if err != nil || !valid {
		return 0
	}
	return leader
}

// MetaMembers answers the meta group's membership read linearizably:
// voters and non-voting members, each node id with its Raft address.
func (m *MetaClient) MetaMembers(ctx context.Context) (voters, nonVoting map[uint64]string, err error) {
	ms, err := membership(ctx, m.nh, m.log, meta.ShardID)
	if err != nil {
		return nil, nil, fmt.Errorf("host: meta group membership: %w", err)
	}
	return ms.Nodes, ms.NonVotings, nil
}

// TransferMetaLeader asks the meta group's leader, this node, to hand its
// leadership to node to; it answers once the request is queued.
func (m *MetaClient) TransferMetaLeader(to uint64) error {
	return m.nh.RequestLeaderTransfer(meta.ShardID, to)
}
