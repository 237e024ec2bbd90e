package meta

import (
	"cmp"
	"encoding/json"
	"slices"

	"github.com/sundialmq/sundial/meta/internal/placement"
	"github.com/sundialmq/sundial/proto/ring"
)

// ShardState is where a shard is in its life: created replicas first
// start and elect a leader, and only then does the shard join the ring.
type ShardState string

// Shard states. A shard of a state made before shard states has none and
// is serving.
const (
	// ShardStarting: made by add_shards (the bootstrap's first shards
	// too); its replicas start as the initial members of a new Raft shard
	// on their nodes, but the ring does not hold it, so nothing is routed
	// to a shard that could not answer yet.
	ShardStarting ShardState = "starting"
	// ShardServing: on the ring.
	ShardServing ShardState = "serving"
)

// Serving reports whether s is on the ring.
func (s *Shard) Serving() bool { return s.State != ShardStarting }

// Handover is a topic partition whose ring owner changed when shards were
// added: its messages stay on From, which keeps delivering them, while new
// unkeyed publishes go to To. Subscriptions and receives read both shards
// until the hand-over closes. It has two phases:
//
//   - open: keyed publishes, and cancel, reschedule and get by key, stay
//     on From, so a key lives in exactly one shard;
//   - sealed (SealedAtMs set by seal_handover, once From holds no key
//     record of the partition, pending or remembered, and the topic's
//     dedup window has passed since the hand-over opened): keyed work
//     goes to To as well, and From takes no publish of the partition.
//
// close_handover ends a sealed hand-over once From holds no copy of the
// partition, waiting or in flight. The broker leading From proposes both
// (its host's hand-over check).
type Handover struct {
	Topic      string       `json:"topic"`
	Partition  uint32       `json:"partition"`
	From       EventShardID `json:"from"`
	To         EventShardID `json:"to"`
	OpenedAtMs int64        `json:"opened_at_ms"`
	SealedAtMs int64        `json:"sealed_at_ms,omitempty"`
}

// KeyedOn is the shard that holds the keys of partition of topic (a base
// topic name) under s while it hands over: From until the hand-over is
// sealed. ok is false when the ring's owner holds them.
func (s *State) KeyedOn(topic string, partition uint32) (EventShardID, bool) {
	h, ok := s.HandoverOf(topic, partition)
	if !ok || h.SealedAtMs != 0 {
		return 0, false
	}
	return h.From, true
}

// RingShards returns the ids of the serving shards, ascending: the shard
// set of the ring every tier routes by.
func (s *State) RingShards() []uint64 {
	var ids []uint64
	for _, id := range s.ShardIDs() {
		if s.Shards[id].Serving() {
			ids = append(ids, uint64(id))
		}
	}
	return ids
}

// StartingShards returns the ids of the shards not on the ring yet.
func (s *State) StartingShards() []EventShardID {
	var ids []EventShardID
	for _, id := range s.ShardIDs() {
		if !s.Shards[id].Serving() {
			ids = append(ids, id)
		}
	}
	return ids
}

// HandoverOf returns the open hand-over of a topic partition. A
// dead-letter topic's partitions hand over with their base topic's, so
// callers pass the base name.
func (s *State) HandoverOf(topic string, partition uint32) (Handover, bool) {
	i, ok := slices.BinarySearchFunc(s.Handovers, Handover{Topic: topic, Partition: partition}, compareHandover)
	if !ok {
		return Handover{}, false
	}
	return s.Handovers[i], true
}

func compareHandover(a, b Handover) int {
	if c := cmp.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// MaxAddShards is the most shards one add_shards creates on a
// bootstrapped cluster; MaxBootstrapShards the most its bootstrap creates.
const (
	MaxAddShards       = 256
	MaxBootstrapShards = 4096
)

// ZoneLabel is the node label whose values replicas of a shard spread
// across; proposers of add_shards name it in the command (ZoneLabel).
const ZoneLabel = "zone"

// addShards applies add_shards c: it creates c.Count shards in the
// starting state on the least-loaded active nodes, never two replicas of
// one shard on a node and spread across the values of node label
// c.ZoneLabel (none when empty), and answers their ids (JSON);
// serve_shards puts them on the ring once each has a leader.
//
// With c.Bootstrap it creates the cluster's first shards, with c.RF
// replicas each (at most one per active node), and names the cluster
// c.ClusterID unless it has a name; ResultNoop once shards exist, so a
// repeated bootstrap changes nothing. Without it the cluster must be
// bootstrapped, and the shards get the replication factor of the
// existing ones.
//
// A growth also stores the seed-groups operations that register the
// topics' groups on the new shards (seedGroups). While shards are starting
// or hand-overs are open (one growth at a time keeps every partition's
// hand-over a single step) it answers ResultNoop with the ids of that
// growth when c.Count is the one it was made with (a retry of the same
// request, after a timeout), and refuses another count with ResultExists;
// it refuses with ResultInvalid a count outside 1..MaxAddShards
// (1..MaxBootstrapShards for the bootstrap), a bootstrap without RF or a
// cluster id, a growth before the bootstrap, or too few active nodes.
func (s *State) addShards(c *Command) (uint64, []byte) {
	limit, rf := MaxAddShards, 0
	switch {
	case c.Bootstrap && len(s.Shards) > 0:
		return ResultNoop, nil
	case c.Bootstrap:
		if c.RF < 1 || s.ClusterID == "" && c.ClusterID == "" {
			return ResultInvalid, nil
		}
		limit, rf = MaxBootstrapShards, min(c.RF, len(s.activeNodes()))
	case len(s.Shards) == 0:
		return ResultInvalid, nil
	default:
		rf = len(s.Shards[s.ShardIDs()[0]].Replicas)
	}
	if c.Count < 1 || c.Count > limit {
		return ResultInvalid, nil
	}
	if len(s.StartingShards()) > 0 || len(s.Handovers) > 0 {
		if !c.Bootstrap && len(s.Growth) == c.Count {
			b, _ := json.Marshal(s.Growth)
			return ResultNoop, b
		}
		return ResultExists, nil
	}
	ids := s.placeShards(c.Count, rf, ShardStarting, c.ZoneLabel)
	if ids == nil {
		return ResultInvalid, nil
	}
	if s.ClusterID == "" {
		s.ClusterID = c.ClusterID
	}
	if !c.Bootstrap {
		s.Growth = ids
		s.seedGroups(c.NowMs)
	}
	s.Version++
	b, _ := json.Marshal(ids)
	return ResultOK, b
}

// activeNodes returns the ids of the active nodes, ascending.
func (s *State) activeNodes() []NodeID {
	var ids []NodeID
	for _, id := range s.NodeIDs() {
		if s.Nodes[id].State == NodeActive {
			ids = append(ids, id)
		}
	}
	return ids
}

// placeShards creates count shards of state with rf replicas each, placed
// by placement.Spread on the active nodes (their loads counted from the
// existing shards, their zones the values of label zoneLabel), and returns
// their ids; nil, changing nothing, when fewer than rf nodes are active.
func (s *State) placeShards(count, rf int, state ShardState, zoneLabel string) []EventShardID {
	load := map[NodeID]int{}
	for _, sh := range s.Shards {
		for _, r := range sh.Replicas {
			load[r.Node]++
		}
	}
	var nodes []placement.Node
	for _, id := range s.activeNodes() {
		n := placement.Node{ID: uint64(id), Replicas: load[id]}
		if zoneLabel != "" {
			n.Zone = s.Nodes[id].Labels[zoneLabel]
		}
		nodes = append(nodes, n)
	}
	plan := placement.Spread(nodes, count, rf)
	if plan == nil {
		return nil
	}
	ids := make([]EventShardID, 0, count)
	for _, onNodes := range plan {
		sh := &Shard{ID: s.NextShardID, State: state}
		s.NextShardID++
		for _, n := range onNodes {
			sh.Replicas = append(sh.Replicas, Replica{ID: s.NextReplicaID, Node: NodeID(n)})
			s.NextReplicaID++
		}
		s.Shards[sh.ID] = sh
		ids = append(ids, sh.ID)
	}
	return ids
}

// seedGroups stores, for every topic with a partition whose ring owner the
// starting shards change, a seed-groups operation registering each of the
// topic's groups on each shard taking one of its partitions. A shard only
// gives a copy of a message to the groups registered on it, so a partition
// handed to a shard without them would feed only the default group.
// serve_shards waits for these operations, so the partitions reach their
// new shards only once the registrations are there. A topic being deleted
// is left out (nothing is published to it again), and so is the group an
// unfinished delete-group removes (its steps, computed before the growth,
// do not name the new shards); groups created afterwards are registered
// on the new shards by their create-group (adminShards).
func (s *State) seedGroups(nowMs int64) {
	before := ring.New(s.RingShards())
	after := ring.New(s.growthRing())
	timeout := DefaultStepTimeouts().Step.Milliseconds()
	for _, name := range s.TopicNames() {
		t := s.Topics[name]
		if t.Deleting != 0 {
			continue
		}
		var targets []EventShardID
		for p := range max(t.Partitions, 1) {
			if from, to := before.Locate(name, p), after.Locate(name, p); from != to {
				targets = append(targets, EventShardID(to))
			}
		}
		if len(targets) == 0 {
			continue
		}
		slices.Sort(targets)
		targets = slices.Compact(targets)
		groups := slices.Clone(t.Groups)
		if cur := s.adminOn(name); cur != nil && cur.Kind == OpKindDeleteGroup {
			groups = slices.DeleteFunc(groups, func(g string) bool { return g == cur.Group })
		}
		op := &Operation{ID: s.nextOperationID(), Kind: OpKindSeedGroups, Topic: name,
			Reason: "topic " + name + " groups on added shards", Status: OperationPending, CreatedAtMs: nowMs}
		for _, id := range targets {
			for _, g := range groups {
				op.Steps = append(op.Steps, Step{Kind: StepRegisterGroup, Shard: id, Group: g, TimeoutMs: timeout, Rollback: RollbackRetry})
			}
		}
		if s.Operations == nil {
			s.Operations = map[OperationID]*Operation{}
		}
		s.Operations[op.ID] = op
	}
}

// growthRing returns the ids of every shard, starting ones included,
// ascending: the ring serve_shards makes of the starting shards.
func (s *State) growthRing() []uint64 {
	ids := make([]uint64, 0, len(s.Shards))
	for _, id := range s.ShardIDs() {
		ids = append(ids, uint64(id))
	}
	return ids
}

// Seeding reports whether a seed-groups operation is unfinished: the
// starting shards wait for it before they serve.
func (s *State) Seeding() bool {
	for _, op := range s.Operations {
		if op.Kind == OpKindSeedGroups && !op.Finished() {
			return true
		}
	}
	return false
}

// serveShards puts the starting shards on the ring, all of them at once
// (ids must name every starting shard: the caller saw each of them with a
// leader), and opens a hand-over for every partition of every topic whose
// ring owner changes. ResultNoop when no shard is starting, ResultInvalid
// when ids leaves one out or names a shard that is not starting,
// ResultBusy while a seed-groups operation is unfinished (the new shards
// do not have the topics' groups yet).
func (s *State) serveShards(ids []EventShardID, nowMs int64) uint64 {
	starting := s.StartingShards()
	if len(starting) == 0 {
		return ResultNoop
	}
	want := slices.Clone(ids)
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(want, starting) {
		return ResultInvalid
	}
	if s.Seeding() {
		return ResultBusy
	}
	before := ring.New(s.RingShards())
	for _, id := range starting {
		s.Shards[id].State = ShardServing
	}
	s.Handovers = append(s.Handovers, Moves(s, before, ring.New(s.RingShards()), nowMs)...)
	slices.SortFunc(s.Handovers, compareHandover)
	s.Version++
	return ResultOK
}

// Moves lists, in topic and partition order, the partitions of st's
// topics that before and after place on different shards, as hand-overs
// opened at nowMs. It is pure.
func Moves(st *State, before, after *ring.Ring, nowMs int64) []Handover {
	var out []Handover
	for _, name := range st.TopicNames() {
		for p := range max(st.Topics[name].Partitions, 1) {
			from, to := before.Locate(name, p), after.Locate(name, p)
			if from != to && from != 0 {
				out = append(out, Handover{Topic: name, Partition: p, From: EventShardID(from), To: EventShardID(to), OpenedAtMs: nowMs})
			}
		}
	}
	return out
}

// sealHandover moves keyed work of topic's partition to the hand-over's
// To shard; ResultNotFound when none is open, ResultNoop when sealed
// already. The proposer checked that From holds no key record of the
// partition and that the dedup window has passed.
func (s *State) sealHandover(topic string, partition uint32, nowMs int64) uint64 {
	i, ok := slices.BinarySearchFunc(s.Handovers, Handover{Topic: topic, Partition: partition}, compareHandover)
	if !ok {
		return ResultNotFound
	}
	if s.Handovers[i].SealedAtMs != 0 {
		return ResultNoop
	}
	s.Handovers[i].SealedAtMs = max(nowMs, 1)
	s.Version++
	return ResultOK
}

// closeHandover ends the sealed hand-over of topic's partition;
// ResultNotFound when none is open, ResultInvalid when it is not sealed.
// The proposer checked that From holds no copy of the partition.
func (s *State) closeHandover(topic string, partition uint32) uint64 {
	i, ok := slices.BinarySearchFunc(s.Handovers, Handover{Topic: topic, Partition: partition}, compareHandover)
	if !ok {
		return ResultNotFound
	}
	if s.Handovers[i].SealedAtMs == 0 {
		return ResultInvalid
	}
	s.Handovers = slices.Delete(s.Handovers, i, i+1)
	s.Version++
	return ResultOK
}

// dropHandovers forgets the hand-overs of a deleted topic.
func (s *State) dropHandovers(topic string) {
	s.Handovers = slices.DeleteFunc(s.Handovers, func(h Handover) bool { return h.Topic == topic })
}
