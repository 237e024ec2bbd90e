package balancer

import (
	"errors"
	"fmt"

	"github.com/sundialmq/sundial/meta"
)

// NodeState is a node's state as the planner sees it: the meta state's
// active and draining, plus dead, which the meta leader declares for a node
// down longer than dead_node_timeout, and suspect, an active node the meta
// leader has not heard from lately. Removed nodes are left out of a view.
type NodeState string

// Node states.
const (
	// NodeActive nodes hold and receive replicas and lead shards.
	NodeActive NodeState = "active"
	// NodeDraining nodes keep serving while every replica and leadership
	// moves off them; they receive nothing.
	NodeDraining NodeState = "draining"
	// NodeDead nodes are gone: their replicas are re-created elsewhere and
	// then dropped from the membership.
	NodeDead NodeState = "dead"
	// NodeSuspect nodes are active nodes that missed their last probes
	// but are not declared dead: they may be down, or only slow. They
	// receive no replica and no leadership (a move onto one would wait
	// for it to catch up and roll back), and keep what they hold: no
	// replica or leadership moves off them, and their replicas count as
	// live, so no repair is planned for them until they are declared dead.
	NodeSuspect NodeState = "suspect"
)

// Node is one broker of the view. Its replica and leader counts are not
// carried: the planner counts them from the view's shards, so they cannot
// disagree with them.
type Node struct {
	ID    meta.NodeID
	State NodeState
	// Labels are the node's location labels, such as zone=a. A node
	// without the zone label (Config.ZoneLabel) is in the zone "".
	Labels map[string]string
	// DiskBytes is the node's data size, zero when not known. It breaks
	// ties between nodes of equal replica counts (fewer bytes receive,
	// more bytes give).
	DiskBytes int64
}

// Shard is one event shard of the view.
type Shard struct {
	ID meta.EventShardID
	// Replicas lists the nodes holding a replica (voter or learner).
	Replicas []meta.NodeID
	// Leader is the node of the leading replica; zero when not known (as
	// after its leader died, until the shard elects another).
	Leader meta.NodeID
	// ReplicationFactor is the number of replicas the shard should have.
	ReplicationFactor int
}

// View is the cluster as the planner sees it: the meta state's nodes and
// shards, each node's liveness, each shard's leader, and the operations not
// finished yet (pending or running). The planner reads the view as if those
// operations had completed and plans nothing more for their shards
// (finished operations in InProgress are ignored).
type View struct {
	Nodes      []Node
	Shards     []Shard
	InProgress []meta.Operation
}

// Config tunes a plan.
type Config struct {
	// MaxOperations caps the operations of one plan. Default 16.
	MaxOperations int
	// ZoneLabel is the label whose values replicas of a shard spread
	// across. Default "zone".
	ZoneLabel string
	// Timeouts bound the steps of planned operations. Default
	// meta.DefaultStepTimeouts().
	Timeouts meta.StepTimeouts
}

// DefaultConfig is 16 operations a plan, spread across "zone", default
// step timeouts.
func DefaultConfig() Config {
	return Config{MaxOperations: 16, ZoneLabel: "zone", Timeouts: meta.DefaultStepTimeouts()}
}

// ErrInvalidConfig is wrapped by Validate's errors.
var ErrInvalidConfig = errors.New("balancer: invalid config")

// Validate reports a config Plan cannot use.
func (c Config) Validate() error {
	switch {
	case c.MaxOperations < 1:
		return fmt.Errorf("%w: max operations %d, want at least 1", ErrInvalidConfig, c.MaxOperations)
	case c.Timeouts.Step <= 0 || c.Timeouts.CatchUp <= 0:
		return fmt.Errorf("%w: step timeouts must be positive", ErrInvalidConfig)
	}
	return nil
}
