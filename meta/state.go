package meta

import (
	"maps"
	"slices"
)

// ShardID is the id of the Raft shard of the meta group.
const ShardID uint64 = 1

// FirstEventShard is the id of the first event shard; ids grow from there.
const FirstEventShard uint64 = 100

// NodeID names a broker; it is also the broker's replica id in the meta group.
type NodeID uint64

// EventShardID names an event shard (a Dragonboat shard id).
type EventShardID uint64

// ReplicaID names one replica of one shard; never reused.
type ReplicaID uint64

// NodeState is a node's place in its life cycle.
type NodeState string

// Node states. Only active nodes are given replicas when shards are
// bootstrapped or moved; register_node stores NodeActive for a new node and
// keeps the state of a registered one, so a dead node re-registering stays
// dead and a drain is not undone. set_node_state moves a node between them
// (see setNodeState): active → draining → removed, draining → active,
// dead → removed. NodeDead is set by declare_dead (the meta leader's healer
// saw no sign of the node for dead_node_timeout) and cleared back to active
// by declare_alive only. A removed node's record stays, so its id and
// incarnation are never reused.
const (
	NodeActive   NodeState = "active"
	NodeDraining NodeState = "draining"
	NodeRemoved  NodeState = "removed"
	NodeDead     NodeState = "dead"
)

// Node is one broker.
type Node struct {
	ID        NodeID    `json:"id"`
	RaftAddr  string    `json:"raft_addr"`
	GRPCAddr  string    `json:"grpc_addr"`
	State     NodeState `json:"state"`
	MetaVoter bool      `json:"meta_voter"`
	// Incarnation names the data dir the node registered with (a random id
	// the broker keeps in it). A record with an incarnation is never taken
	// over by another one: a node id that comes back on another data dir is
	// not the same member. Empty in records made before incarnations.
	Incarnation string `json:"incarnation,omitempty"`
	// Labels are the node's location labels (zone=a, rack=r1), as the broker
	// registered or joined with them; the planner spreads a shard's replicas
	// over the values of "zone". A record's map is never changed in place:
	// a new registration replaces it.
	Labels map[string]string `json:"labels,omitempty"`
	// Starts is the start count the node last registered (its data dir
	// counts its starts: identity.Identity.Starts). It never goes down: a
	// registration with a lower count comes from an older copy of the
	// node's data dir and is refused. 0 in records made before counts.
	Starts uint64 `json:"starts,omitempty"`
	// Run is a random id of the broker process that registered Starts: a
	// second registration of the same count by another process is refused
	// too (an older copy restarted as many times as the node since the copy).
	Run string `json:"run,omitempty"`
	// BeforeDead is the state the node had when declare_dead made it dead
	// (active or draining), restored by declare_alive so a drain outlives
	// a crash; empty unless the node is dead.
	BeforeDead NodeState `json:"before_dead,omitempty"`
}

// Clone copies n, labels included.
func (n *Node) Clone() *Node {
	nn := *n
	nn.Labels = maps.Clone(n.Labels)
	return &nn
}

// Equal says n and o are the same record.
func (n *Node) Equal(o *Node) bool {
	return n.ID == o.ID && n.RaftAddr == o.RaftAddr && n.GRPCAddr == o.GRPCAddr && n.State == o.State &&
		n.MetaVoter == o.MetaVoter && n.Incarnation == o.Incarnation && maps.Equal(n.Labels, o.Labels) && n.BeforeDead == o.BeforeDead &&
		n.Starts == o.Starts && n.Run == o.Run
}

// Replica places one replica of a shard on a node.
type Replica struct {
	ID   ReplicaID `json:"id"`
	Node NodeID    `json:"node"`
	// Join marks a replica added to a running shard by an operation: its
	// host starts it with join=true and no initial members, and it catches
	// up from the shard's leader. Bootstrap replicas have it false.
	Join bool `json:"join,omitempty"`
}

// Shard is an event shard and its replicas, ordered by replica id.
type Shard struct {
	ID       EventShardID `json:"id"`
	Replicas []Replica    `json:"replicas"`
	// State is ShardStarting for a shard add_shards made that is not on
	// the ring yet; empty (serving) otherwise.
	State ShardState `json:"state,omitempty"`
}

// ReplicaOn returns the replica of s on node n.
func (s *Shard) ReplicaOn(n NodeID) (Replica, bool) {
	for _, r := range s.Replicas {
		if r.Node == n {
			return r, true
		}
	}
	return Replica{}, false
}

// Topic is a topic's configuration. Zero durations and counts never appear:
// defaults are filled in when the topic is created.
type Topic struct {
	Name                string   `json:"name"`
	Kind                string   `json:"kind"` // "delayed" or "fair"
	Partitions          uint32   `json:"partitions"`
	VisibilityTimeoutMs int64    `json:"visibility_timeout_ms"`
	MaxAttempts         int32    `json:"max_attempts"`
	RetentionMs         int64    `json:"retention_ms"`
	MaxMessageBytes     int64    `json:"max_message_bytes"`
	DedupWindowMs       int64    `json:"dedup_window_ms"`
	Groups              []string `json:"groups"`
	CreatedAtMs         int64    `json:"created_at_ms"`
	// ReleaseRatePerSec caps deliveries per second; 0 is unlimited.
	ReleaseRatePerSec float64 `json:"release_rate_per_sec,omitempty"`
	// JitterMs spreads due times by up to this much.
	JitterMs int64 `json:"jitter_ms,omitempty"`
	// FairnessWeights weighs fairness keys of FAIR topics (default 1).
	FairnessWeights map[string]int32 `json:"fairness_weights,omitempty"`
	// Backoff of redeliveries after a nack without delay.
	BackoffBaseMs int64 `json:"backoff_base_ms,omitempty"`
	BackoffMaxMs  int64 `json:"backoff_max_ms,omitempty"`
	// Deleting is the id of the unfinished delete-topic operation removing
	// the topic (adminop.go), zero when none: a deleting topic refuses
	// publishes, group changes and a create of its name.
	Deleting OperationID `json:"deleting,omitempty"`
}

// State is the whole metadata.
type State struct {
	// Version is the routing version; it grows with every routable change.
	Version uint64 `json:"version"`
	// ClusterID is chosen by the first bootstrap (empty before it) and
	// never changes: brokers keep it in their data dirs and refuse a data
	// dir of another cluster.
	ClusterID     string                  `json:"cluster_id,omitempty"`
	Nodes         map[NodeID]*Node        `json:"nodes"`
	Shards        map[EventShardID]*Shard `json:"shards"`
	Topics        map[string]*Topic       `json:"topics"`
	NextReplicaID ReplicaID               `json:"next_replica_id"`
	NextShardID   EventShardID            `json:"next_shard_id"`
	// Operations are the replica and leadership changes submitted by a
	// rebalance, finished ones included, by id.
	Operations map[OperationID]*Operation `json:"operations,omitempty"`
	// NextOperationID is the id the next submitted operation gets; zero
	// in states made before operations, read as 1.
	NextOperationID OperationID `json:"next_operation_id,omitempty"`
	// Handovers are the open partition hand-overs (shards.go), sorted by
	// topic and partition.
	Handovers []Handover `json:"handovers,omitempty"`
	// Growth is the shards the last add_shards made, ascending: while they
	// start or hand-overs are open, the same add_shards again (a retry)
	// answers them.
	Growth []EventShardID `json:"growth,omitempty"`
	// JoinTokens are the join tokens by id (jointoken.go).
	JoinTokens map[string]*JoinToken `json:"join_tokens,omitempty"`
	// Auth is the tokens, roles and receipt keys (auth.go); nil until the
	// first auth command. Its changes do not change Version: nothing
	// routes on them.
	Auth *Auth `json:"auth,omitempty"`
	// Backups are the backup runs, oldest first: the running one (at most
	// one) and the last BackupRunsKept finished ones (backup.go).
	Backups []*BackupRun `json:"backups,omitempty"`
	// RestoredFrom is the backup restore_catalog installed the catalog
	// of; empty for a cluster never restored.
	RestoredFrom string `json:"restored_from,omitempty"`
	// BackupSchedule is the backup schedule; nil when none is set.
	BackupSchedule *BackupSchedule `json:"backup_schedule,omitempty"`
}

// NewState is the empty state of a new cluster.
func NewState() *State {
	return &State{
		Nodes:         map[NodeID]*Node{},
		Shards:        map[EventShardID]*Shard{},
		Topics:        map[string]*Topic{},
		NextReplicaID: 1,
		NextShardID:   EventShardID(FirstEventShard),
	}
}

// Clone is a deep copy.
func (s *State) Clone() *State {
	c := &State{
		Version:       s.Version,
		ClusterID:     s.ClusterID,
		Nodes:         make(map[NodeID]*Node, len(s.Nodes)),
		Shards:        make(map[EventShardID]*Shard, len(s.Shards)),
		Topics:        make(map[string]*Topic, len(s.Topics)),
		NextReplicaID: s.NextReplicaID,
		NextShardID:   s.NextShardID,

		NextOperationID: s.NextOperationID,
		Handovers:       slices.Clone(s.Handovers),
		Growth:          slices.Clone(s.Growth),
		JoinTokens:      cloneJoinTokens(s.JoinTokens),
		Auth:            s.Auth.Clone(),
		Backups:         cloneBackups(s.Backups),
		RestoredFrom:    s.RestoredFrom,
		BackupSchedule:  cloneSchedule(s.BackupSchedule),
	}
	if s.Operations != nil {
		c.Operations = make(map[OperationID]*Operation, len(s.Operations))
		for id, op := range s.Operations {
			c.Operations[id] = op.Clone()
		}
	}
	for id, n := range s.Nodes {
		c.Nodes[id] = n.Clone()
	}
	for id, sh := range s.Shards {
		c.Shards[id] = &Shard{ID: sh.ID, Replicas: slices.Clone(sh.Replicas), State: sh.State}
	}
	for name, t := range s.Topics {
		c.Topics[name] = t.Clone()
	}
	return c
}

// NodeIDs returns the node ids in ascending order.
func (s *State) NodeIDs() []NodeID { return slices.Sorted(maps.Keys(s.Nodes)) }

// ShardIDs returns the event shard ids in ascending order.
func (s *State) ShardIDs() []EventShardID { return slices.Sorted(maps.Keys(s.Shards)) }

// TopicNames returns the topic names in ascending order.
func (s *State) TopicNames() []string { return slices.Sorted(maps.Keys(s.Topics)) }

// Clone is a deep copy.
func (t *Topic) Clone() *Topic {
	tt := *t
	tt.Groups = slices.Clone(t.Groups)
	tt.FairnessWeights = maps.Clone(t.FairnessWeights)
	return &tt
}
