package service

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/meta"
	"github.com/sundialmq/sundial/proto/ring"
	"github.com/sundialmq/sundial/proto/validate"
)

// Admin operations: DeleteTopic, CreateGroup and DeleteGroup touch every
// shard holding the topic's partitions, so they are submitted to the meta
// group as operations (meta/adminop.go) that the executor on the meta
// leader runs step by step, and the call waits for the operation to end.
// The proposal reaches the meta leader from any broker (Dragonboat
// forwards it); the wait polls linearizable meta reads. When the caller's
// deadline passes first the answer is DeadlineExceeded and the operation
// still completes; the same request again finds the running operation
// (submit_admin answers its id) and waits on it instead of starting a
// second.

// adminWaitTimeout bounds the wait of a call that carries no deadline.
const adminWaitTimeout = time.Minute

// adminPollInterval is how often a waiting call reads the meta state.
const adminPollInterval = 100 * time.Millisecond

// runAdmin submits op and waits for it (or for the operation it finds
// already running on the topic) to end. Another change of the topic that
// is unfinished is waited for first, then op is submitted again.
func (a *Admin) runAdmin(ctx context.Context, op meta.Operation, ifNotExists bool) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, adminWaitTimeout)
		defer cancel()
	}
	for {
		c := &meta.Command{Op: meta.OpSubmitAdmin, Operations: []meta.Operation{op}, IfNotExists: ifNotExists}
		code, data, err := a.meta.ProposeMeta(ctx, c)
		if err != nil {
			return err
		}
		var id meta.OperationID
		if len(data) > 0 {
			if err := json.Unmarshal(data, &id); err != nil {
				return status.Errorf(codes.Internal, "decode submitted operation id: %v", err)
			}
		}
		switch code {
		case meta.ResultOK, meta.ResultNoop:
			return a.waitOperation(ctx, id)
		case meta.ResultBusy:
			if err := a.waitOperation(ctx, id); err != nil && ctx.Err() != nil {
				return err
			}
			continue // the other change ended (however): submit ours again
		}
		return meta.ResultError(c, code)
	}
}

// waitOperation waits until operation id ends: nil when done, Aborted
// with its error when it failed or was rolled back, DeadlineExceeded
// (saying it still runs) when ctx ends first.
func (a *Admin) waitOperation(ctx context.Context, id meta.OperationID) error {
	for {
		st, err := a.meta.ReadMeta(ctx)
		if err == nil {
			op := st.Operations[id]
			switch {
			case op == nil:
				return status.Errorf(codes.Internal, "operation %d is not in the meta state", id)
			case op.Status == meta.OperationDone:
				return nil
			case op.Finished():
				return status.Errorf(codes.Aborted, "operation %d (%s of topic %q) ended %s: %s", id, op.Kind, op.Topic, op.Status, op.Error)
			}
		}
		select {
		case <-ctx.Done():
			return status.Errorf(codes.DeadlineExceeded,
				"operation %d still runs and will complete: send the same request again to wait for it (%v)", id, ctx.Err())
		case <-time.After(adminPollInterval):
		}
	}
}

// topicShards lists the shards holding partitions of topic (and so of its
// dead-letter topic) under st: the ring over st's event shards, as the
// proxies route.
func topicShards(st *meta.State, topic string) []meta.EventShardID {
	base := validate.DeadLetterBase(topic)
	parts := uint32(1)
	if t, ok := st.Topics[base]; ok {
		parts = max(t.Partitions, 1)
	}
	ids := make([]uint64, 0, len(st.Shards))
	for _, id := range st.ShardIDs() {
		ids = append(ids, uint64(id))
	}
	r := ring.New(ids)
	var out []meta.EventShardID
	seen := map[uint64]bool{}
	for p := range parts {
		if s := r.Locate(base, p); s != 0 && !seen[s] {
			seen[s] = true
			out = append(out, meta.EventShardID(s))
		}
	}
	return out
}

// adminOperation builds the operation of kind over the shards of topic
// under the meta state read now.
func (a *Admin) adminOperation(ctx context.Context, kind meta.OperationKind, topic, group string) (meta.Operation, error) {
	st, err := a.meta.ReadMeta(ctx)
	if err != nil {
		return meta.Operation{}, err
	}
	shards, timeout := topicShards(st, topic), a.opts.StepTimeouts.Step
	if timeout <= 0 {
		timeout = meta.DefaultStepTimeouts().Step
	}
	switch kind {
	case meta.OpKindDeleteTopic:
		return meta.NewDeleteTopic(topic, shards, timeout), nil
	case meta.OpKindCreateGroup:
		return meta.NewCreateGroup(topic, group, shards, timeout), nil
	case meta.OpKindDeleteGroup:
		return meta.NewDeleteGroup(topic, group, shards, timeout), nil
	}
	return meta.Operation{}, fmt.Errorf("service: %s is not an admin operation", kind)
}
