package meta

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sundialmq/sundial/proto/ring"
)

// Admin operations: topic and group changes that touch every shard holding
// a topic's partitions. Each is persisted like a replica move and run by
// the executor on the meta leader, one step per shard, so a proxy or meta
// leader that dies half-way leaves nothing half-done: a new meta leader
// resumes the operation at its persisted step. Their steps are idempotent
// (registering a group twice, forgetting a topic twice) and roll forward
// (RollbackRetry): once started, an admin operation always completes.
//
// Rules the meta state machine keeps (submitAdmin):
//   - At most one unfinished admin operation per topic. A submit of the
//     same kind, topic and group as the unfinished one answers that one's
//     id (ResultNoop), so a retried request waits on the running operation
//     and never starts a second; a submit of another change of the topic
//     answers ResultBusy with the id to wait for.
//   - create-group adds the group to the topic when submitted (ListGroups
//     shows it at once) and registers it on each shard; create_topic
//     stores a create-topic operation registering the groups it was
//     given the same way (createTopicGroups); delete-group and
//     delete-topic change the topic only when their last step completes,
//     in the same entry that ends the operation.
//   - A topic with an unfinished delete-topic is marked Deleting: creating
//     it again, creating or deleting its groups and publishing to it are
//     refused (ResultDeleting, FailedPrecondition "being deleted") until
//     the topic is gone.
//   - Admin operations name no shard of their own (Operation.Shard is
//     zero), so they never make a shard busy for the planner, and
//     UnfinishedMoves leaves them out: a rebalance is not held up by them.
const (
	// OpKindDeleteTopic removes Topic (and its dead-letter topic) from
	// every shard holding their partitions, then from the meta state.
	OpKindDeleteTopic OperationKind = "delete-topic"
	// OpKindCreateGroup registers Group of Topic on every shard holding
	// the topic's partitions, so each gives it a copy of every message
	// published from then on.
	OpKindCreateGroup OperationKind = "create-group"
	// OpKindDeleteGroup removes Group's copies and registration from every
	// shard holding the topic's partitions, then the group from the topic.
	OpKindDeleteGroup OperationKind = "delete-group"
	// OpKindSeedGroups registers the groups of Topic on the shards
	// add_shards made that take partitions of the topic (shards.go
	// seedGroups), before serve_shards puts them on the ring. Each step
	// names its group (Step.Group); the operation's Group is empty.
	OpKindSeedGroups OperationKind = "seed-groups"
	// OpKindCreateTopic registers the groups a topic is created with
	// (other than the default group, which a shard registers on its first
	// use of the topic) on every shard holding the topic's partitions.
	// create_topic stores it in the entry that creates the topic, so the
	// groups are never listed without their registrations on the way.
	// Each step names its group (Step.Group); the operation's Group is
	// empty.
	OpKindCreateTopic OperationKind = "create-topic"
)

// Admin step kinds; each names its shard in Step.Shard and is done on
// that shard's leader (Shard.Group).
const (
	// StepRegisterGroup registers the operation's group on the shard.
	StepRegisterGroup StepKind = "register-group"
	// StepForgetGroup removes the group's copies and registration from
	// the shard.
	StepForgetGroup StepKind = "forget-group"
	// StepForgetTopic removes the topic and its dead-letter topic from the
	// shard: copies, key records, counters and group registrations.
	StepForgetTopic StepKind = "forget-topic"
)

// Admin reports whether k is a topic or group change rather than a
// replica or leadership change.
func (k OperationKind) Admin() bool {
	switch k {
	case OpKindDeleteTopic, OpKindCreateGroup, OpKindDeleteGroup, OpKindSeedGroups, OpKindCreateTopic:
		return true
	}
	return false
}

// NewDeleteTopic deletes topic: forget-topic on each of shards (the shards
// holding its partitions), then the topic leaves the meta state.
func NewDeleteTopic(topic string, shards []EventShardID, stepTimeout time.Duration) Operation {
	return newAdmin(OpKindDeleteTopic, StepForgetTopic, topic, "", shards, stepTimeout)
}

// NewCreateGroup registers group of topic on each of shards.
func NewCreateGroup(topic, group string, shards []EventShardID, stepTimeout time.Duration) Operation {
	return newAdmin(OpKindCreateGroup, StepRegisterGroup, topic, group, shards, stepTimeout)
}

// NewDeleteGroup removes group of topic from each of shards, then from the
// topic.
func NewDeleteGroup(topic, group string, shards []EventShardID, stepTimeout time.Duration) Operation {
	return newAdmin(OpKindDeleteGroup, StepForgetGroup, topic, group, shards, stepTimeout)
}

func newAdmin(kind OperationKind, step StepKind, topic, group string, shards []EventShardID, stepTimeout time.Duration) Operation {
	ids := slices.Clone(shards)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	reason := "topic " + topic
	if group != "" {
		reason += " group " + group
	}
	// The reason names topic and group for listings that show no such
	// fields (Cluster.ListOperations, shardctl operations).
	op := Operation{Kind: kind, Topic: topic, Group: group, Reason: reason, Status: OperationPending}
	for _, id := range ids {
		op.Steps = append(op.Steps, Step{Kind: step, Shard: id, TimeoutMs: stepTimeout.Milliseconds(), Rollback: RollbackRetry})
	}
	return op
}

func (o Operation) adminString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s):", o.Kind, o.Reason)
	for i, s := range o.Steps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, " %s shard %d", s.Kind, s.Shard)
		if s.Group != "" {
			fmt.Fprintf(&b, " group %s", s.Group)
		}
	}
	return b.String()
}

// UnfinishedMoves is Unfinished without the admin operations: the replica
// and leadership changes a rebalance waits for and plans around.
func (s *State) UnfinishedMoves() []Operation {
	return slices.DeleteFunc(s.Unfinished(), func(op Operation) bool { return op.Kind.Admin() })
}

// adminOn returns the unfinished admin operation on topic, nil if none.
func (s *State) adminOn(topic string) *Operation {
	for _, id := range s.OperationIDs() {
		if op := s.Operations[id]; op.Kind.Admin() && op.Topic == topic && !op.Finished() {
			return op
		}
	}
	return nil
}

// submitAdmin stores one admin operation under the rules in the comment
// at the top of this file. It answers ResultOK with the new operation's
// id (JSON), ResultNoop with the id of the same operation already
// unfinished, ResultBusy with the id of another unfinished operation on
// the topic, ResultDeleting when the topic is being deleted,
// ResultNotFound for a missing topic or (delete-group) group,
// ResultExists for a create-group of an existing group without
// ifNotExists (with it, the group is registered on the shards again),
// ResultOverLimit for a group past MaxGroupsPerTopic, and
// ResultInvalid for anything but an admin operation or a removal of the
// default group.
func (s *State) submitAdmin(op *Operation, ifNotExists bool, nowMs int64) (uint64, []byte) {
	if op == nil || !op.Kind.Admin() || op.Kind == OpKindSeedGroups || op.Kind == OpKindCreateTopic || op.Topic == "" || (op.Kind != OpKindDeleteTopic && op.Group == "") {
		return ResultInvalid, nil
	}
	t, ok := s.Topics[op.Topic]
	if !ok {
		return ResultNotFound, nil
	}
	if cur := s.adminOn(op.Topic); cur != nil {
		b, _ := json.Marshal(cur.ID)
		switch {
		case cur.Kind == op.Kind && cur.Group == op.Group:
			return ResultNoop, b
		case cur.Kind == OpKindDeleteTopic:
			return ResultDeleting, b
		}
		return ResultBusy, b
	}
	has := slices.Contains(t.Groups, op.Group)
	switch op.Kind {
	case OpKindCreateGroup:
		if has && !ifNotExists {
			return ResultExists, nil
		}
		if !has && len(t.Groups) >= MaxGroupsPerTopic {
			return ResultOverLimit, nil
		}
	case OpKindDeleteGroup:
		if op.Group == DefaultGroup {
			return ResultInvalid, nil
		}
		if !has {
			return ResultNotFound, nil
		}
	}
	o := op.Clone()
	o.ID = s.nextOperationID()
	o.Steps = s.adminSteps(o)
	o.Shard, o.From, o.To, o.NewReplica = 0, 0, 0, 0
	o.Status, o.Current, o.Error = OperationPending, 0, ""
	o.CreatedAtMs, o.StartedAtMs, o.FinishedAtMs = nowMs, 0, 0
	if s.Operations == nil {
		s.Operations = map[OperationID]*Operation{}
	}
	s.Operations[o.ID] = o
	switch o.Kind {
	case OpKindCreateGroup:
		if !has {
			t.Groups = append(t.Groups, o.Group)
			slices.Sort(t.Groups)
		}
	case OpKindDeleteTopic:
		t.Deleting = o.ID
	}
	if len(o.Steps) == 0 { // no shard holds the topic: nothing to wait for
		o.StartedAtMs = nowMs
		s.completeAdmin(o, nowMs)
	}
	s.Version++
	b, _ := json.Marshal(o.ID)
	return ResultOK, b
}

// completeAdmin ends an admin operation whose steps are all done and makes
// the meta change it ends with: delete-topic removes the topic,
// delete-group the group.
func (s *State) completeAdmin(op *Operation, nowMs int64) {
	op.Status, op.FinishedAtMs = OperationDone, nowMs
	t := s.Topics[op.Topic]
	if t == nil {
		return
	}
	switch op.Kind {
	case OpKindDeleteTopic:
		if t.Deleting == op.ID {
			delete(s.Topics, op.Topic)
		}
	case OpKindDeleteGroup:
		t.Groups = slices.DeleteFunc(t.Groups, func(g string) bool { return g == op.Group })
	}
}

// nextOperationID takes the id of the next stored operation.
func (s *State) nextOperationID() OperationID {
	if s.NextOperationID == 0 {
		s.NextOperationID = 1
	}
	id := s.NextOperationID
	s.NextOperationID++
	return id
}

// adminSteps returns op's steps over its own shards and every shard of
// adminShards(op.Topic) it does not name, in shard order: the submitter
// computed its shards from a meta state read earlier, which may predate
// shards added or hand-overs opened since; this state is the one the
// operation runs under.
func (s *State) adminSteps(op *Operation) []Step {
	kind := map[OperationKind]StepKind{OpKindDeleteTopic: StepForgetTopic, OpKindCreateGroup: StepRegisterGroup, OpKindDeleteGroup: StepForgetGroup}[op.Kind]
	timeout := DefaultStepTimeouts().Step.Milliseconds()
	named := map[EventShardID]bool{}
	for _, st := range op.Steps {
		named[st.Shard] = true
		timeout = st.TimeoutMs
	}
	steps := slices.Clone(op.Steps)
	for _, id := range s.adminShards(op.Topic) {
		if !named[id] {
			steps = append(steps, Step{Kind: kind, Shard: id, TimeoutMs: timeout, Rollback: RollbackRetry})
		}
	}
	slices.SortStableFunc(steps, func(a, b Step) int { return cmp.Compare(a.Shard, b.Shard) })
	return steps
}

// adminShards lists, ascending, every shard that holds or may soon hold a
// partition of topic (a base topic name; its dead-letter topic's
// partitions are on the same shards): the owner of each partition under
// the ring, under the ring the starting shards will make, and both ends
// of the partition's open hand-over.
func (s *State) adminShards(topic string) []EventShardID {
	t, ok := s.Topics[topic]
	if !ok {
		return nil
	}
	seen := map[EventShardID]bool{}
	for _, ids := range [][]uint64{s.RingShards(), s.growthRing()} {
		r := ring.New(ids)
		for p := range max(t.Partitions, 1) {
			if id := r.Locate(topic, p); id != 0 {
				seen[EventShardID(id)] = true
			}
		}
	}
	for _, h := range s.Handovers {
		if h.Topic == topic {
			seen[h.From], seen[h.To] = true, true
		}
	}
	out := make([]EventShardID, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// createTopicGroups stores, for topic t just created, the create-topic
// operation registering its groups other than the default one on every
// shard of adminShards, one step per shard and group; nothing when it has
// no other group. With no shard to register on, the operation is done at
// once.
func (s *State) createTopicGroups(t *Topic, nowMs int64) {
	groups := slices.DeleteFunc(slices.Clone(t.Groups), func(g string) bool { return g == DefaultGroup })
	if len(groups) == 0 {
		return
	}
	op := &Operation{ID: s.nextOperationID(), Kind: OpKindCreateTopic, Topic: t.Name,
		Reason: "topic " + t.Name + " groups " + strings.Join(groups, ","), Status: OperationPending, CreatedAtMs: nowMs}
	timeout := DefaultStepTimeouts().Step.Milliseconds()
	for _, id := range s.adminShards(t.Name) {
		for _, g := range groups {
			op.Steps = append(op.Steps, Step{Kind: StepRegisterGroup, Shard: id, Group: g, TimeoutMs: timeout, Rollback: RollbackRetry})
		}
	}
	if s.Operations == nil {
		s.Operations = map[OperationID]*Operation{}
	}
	s.Operations[op.ID] = op
	if len(op.Steps) == 0 {
		op.StartedAtMs = nowMs
		s.completeAdmin(op, nowMs)
	}
}

// TopicGroupsOperation returns the newest create-topic operation of topic
// (the one registering the groups it was created with), nil if none.
func (s *State) TopicGroupsOperation(topic string) *Operation {
	var found *Operation
	for _, op := range s.Operations {
		if op.Kind == OpKindCreateTopic && op.Topic == topic && (found == nil || op.ID > found.ID) {
			found = op
		}
	}
	return found
}
