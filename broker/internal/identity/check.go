package identity

import "fmt"

// Peer is what one peer's meta replica has applied about the cluster.
type Peer struct {
	NodeID    uint64
	Addr      string
	ClusterID string // empty before the first bootstrap
	// Known maps each registered node to its incarnation (empty for
	// records made before incarnations).
	Known map[uint64]string
	// Removed holds the registered nodes whose state is removed.
	Removed map[uint64]bool
	// Starts maps registered nodes to the start count they last registered
	// (absent: none registered yet).
	Starts map[uint64]uint64
}

// Local is what a starting broker knows about itself.
type Local struct {
	NodeID  uint64 // configured
	DataDir string
	// Identity is the data dir's identity, nil if it has none.
	Identity *Identity
	// HasData: the data dir holds a Raft log or a state DB.
	HasData bool
}

// Check decides whether the broker may start on its data dir, given what
// the peers that answered know. It refuses:
//   - a data dir whose identity names another node id (ErrMismatch);
//   - a data dir whose identity names another cluster than a peer's
//     (ErrMismatch);
//   - an empty data dir for a node id a peer knows, and a data dir of
//     another incarnation than the one a peer knows (ErrUnsafeRejoin);
//   - a node id a peer knows as removed (ErrRemoved);
//   - a data dir of the node's own incarnation whose start count is below
//     the one a peer knows (ErrBehind): a copy taken before the node's last
//     start. A copy taken since then has the same count and is found only
//     by Dragonboat, when the Raft log meets a leader that remembers more.
//
// A data dir with data and no identity predates identity files and is
// accepted. Peers that did not answer cannot refuse anything: the meta
// state's incarnation check is the second line.
func Check(l Local, peers []Peer) error {
	id := l.Identity
	if id != nil && id.NodeID != l.NodeID {
		return fmt.Errorf("%w: data dir %s belongs to node %d, but this broker is configured as node %d: "+
			"start node %d on it, or point node %d at its own data dir",
			ErrMismatch, l.DataDir, id.NodeID, l.NodeID, id.NodeID, l.NodeID)
	}
	for _, p := range peers {
		inc, known := p.Known[l.NodeID]
		switch {
		case known && p.Removed[l.NodeID]:
			return fmt.Errorf("%w: node %d was removed from the cluster (peer node %d at %s knows it as removed); "+
				"a removed node id is never reused: start this machine on an empty data dir with --join to join as a new node",
				ErrRemoved, l.NodeID, p.NodeID, p.Addr)
		case id != nil && id.ClusterID != "" && p.ClusterID != "" && id.ClusterID != p.ClusterID:
			return fmt.Errorf("%w: data dir %s belongs to cluster %s, but peer node %d at %s is in cluster %s: "+
				"point data_dir at this node's data for cluster %s, or initial_members at the cluster of this data dir",
				ErrMismatch, l.DataDir, id.ClusterID, p.NodeID, p.Addr, p.ClusterID, p.ClusterID)
		case id == nil && !l.HasData && known:
			return fmt.Errorf("%w: data dir %s is empty, but node %d is already a member of the cluster (peer node %d at %s knows it); "+
				"starting it would rejoin its Raft groups with empty logs and can lose committed entries. "+
				"Restore this node's data dir, or remove node %d from the cluster and start this machine under a new node id",
				ErrUnsafeRejoin, l.DataDir, l.NodeID, p.NodeID, p.Addr, l.NodeID)
		case id != nil && known && inc != "" && inc != id.Incarnation:
			return fmt.Errorf("%w: node %d is a member with incarnation %s (peer node %d at %s knows it), but data dir %s holds incarnation %s: "+
				"it is not the data dir node %d last ran on (an old copy?); start node %d on its current data dir",
				ErrUnsafeRejoin, l.NodeID, inc, p.NodeID, p.Addr, l.DataDir, id.Incarnation, l.NodeID, l.NodeID)
		case id != nil && known && p.Starts[l.NodeID] > id.Starts:
			return fmt.Errorf("%w: data dir %s is older than the one node %d last ran on (an old copy or a restored backup): "+
				"it holds the node's start %d, but peer node %d at %s knows start %d; its Raft log may end before entries the cluster already committed with this node. "+
				"Restore the data dir node %d last ran on, or remove the node (shardctl remove-node --force %d) and start this machine on an empty data dir with --join as a new node; "+
				"starting again on this data dir fails the same way",
				ErrBehind, l.DataDir, l.NodeID, id.Starts, p.NodeID, p.Addr, p.Starts[l.NodeID], l.NodeID, l.NodeID)
		}
	}
	return nil
}
