package meta

import (
	"encoding/json"
	"slices"

	"github.com/sundialmq/sundial/meta/internal/placement"
)

// Apply changes s by c and returns a result code and, for topics, the
// topic as stored. It is deterministic.
func (s *State) Apply(c *Command) (uint64, []byte) {
	switch c.Op {
	case OpRegisterNode:
		return s.registerNode(c.Node), nil
	case OpJoinNode:
		return s.joinNode(c.Node, c.ClusterID)
	case OpBootstrapShards:
		return s.bootstrapShards(c.Count, c.RF, c.ClusterID), nil
	case OpCreateTopic:
		return s.createTopic(c.Topic, c.IfNotExists, c.NowMs)
	case OpUpdateTopic:
		return s.updateTopic(c.Topic)
	case OpDeleteTopic:
		if _, ok := s.Topics[c.Name]; !ok {
			return ResultNotFound, nil
		}
		delete(s.Topics, c.Name)
		s.Version++
		return ResultOK, nil
	case OpCreateGroup:
		return s.createGroup(c.Name, c.Group, c.IfNotExists)
	case OpDeleteGroup:
		return s.deleteGroup(c.Name, c.Group)
	case OpSubmitOperations:
		return s.submitOperations(c.Operations, c.NowMs)
	case OpStartOperation:
		return s.startOperation(c.OperationID, c.NowMs), nil
	case OpAdvanceOperation:
		return s.advanceOperation(c.OperationID, c.Step, c.NowMs), nil
	case OpFinishOperation:
		return s.finishOperation(c.OperationID, c.Status, c.Error, c.NowMs), nil
	}
	return ResultInvalid, nil
}

// registerNode adds or updates a node's record. A record with an
// incarnation is only updated by the same incarnation: ResultExists refuses
// a node id that came back on another data dir.
func (s *State) registerNode(n *Node) uint64 {
	old, ok := s.Nodes[n.ID]
	if ok && old.Equal(n) {
		return ResultNoop
	}
	if ok && old.Incarnation != "" && old.Incarnation != n.Incarnation {
		return ResultExists
	}
	nn := n.Clone()
	if nn.State == "" {
		nn.State = NodeActive
	}
	s.Nodes[n.ID] = nn
	s.Version++
	return ResultOK
}

// joinNode registers a broker that joins a bootstrapped cluster, as an
// active node that does not vote in the meta group and holds no replicas.
// A node id of 0 is assigned the lowest id above every registered one. It
// answers the node record as stored (JSON) with ResultOK, or with
// ResultNoop when the same data dir (incarnation) joined already, so a
// retried join gets the same answer. It refuses with ResultExists a node
// id registered with another data dir, and with ResultInvalid a cluster
// not bootstrapped yet or a data dir of another cluster.
func (s *State) joinNode(n *Node, clusterID string) (uint64, []byte) {
	if s.ClusterID == "" || (clusterID != "" && clusterID != s.ClusterID) {
		return ResultInvalid, nil
	}
	for _, id := range s.NodeIDs() {
		if old := s.Nodes[id]; old.Incarnation == n.Incarnation && (n.ID == 0 || n.ID == id) {
			b, _ := json.Marshal(old)
			return ResultNoop, b
		}
	}
	nn := n.Clone()
	if nn.ID == 0 {
		nn.ID = 1
		if ids := s.NodeIDs(); len(ids) > 0 {
			nn.ID = ids[len(ids)-1] + 1
		}
	}
	if _, taken := s.Nodes[nn.ID]; taken {
		return ResultExists, nil
	}
	nn.State, nn.MetaVoter = NodeActive, false
	s.Nodes[nn.ID] = nn
	s.Version++
	b, _ := json.Marshal(nn)
	return ResultOK, b
}

func (s *State) bootstrapShards(count, rf int, clusterID string) uint64 {
	if s.ClusterID == "" && clusterID != "" {
		// Clusters bootstrapped before cluster ids get theirs from the next
		// bootstrap proposal, which creates no shards.
		s.ClusterID = clusterID
		if len(s.Shards) > 0 {
			s.Version++
			return ResultOK
		}
	}
	if len(s.Shards) > 0 {
		return ResultNoop
	}
	var nodes []placement.Node
	for _, id := range s.NodeIDs() {
		if s.Nodes[id].State == NodeActive {
			nodes = append(nodes, placement.Node{ID: uint64(id)})
		}
	}
	rf = min(rf, len(nodes))
	plan := placement.Spread(nodes, count, rf)
	if plan == nil {
		return ResultInvalid
	}
	for _, onNodes := range plan {
		sh := &Shard{ID: s.NextShardID}
		s.NextShardID++
		for _, n := range onNodes {
			sh.Replicas = append(sh.Replicas, Replica{ID: s.NextReplicaID, Node: NodeID(n)})
			s.NextReplicaID++
		}
		s.Shards[sh.ID] = sh
	}
	s.Version++
	return ResultOK
}

func (s *State) createTopic(t *Topic, ifNotExists bool, nowMs int64) (uint64, []byte) {
	if old, ok := s.Topics[t.Name]; ok {
		b, _ := json.Marshal(old)
		if ifNotExists {
			return ResultNoop, b
		}
		return ResultExists, b
	}
	tt := *t
	tt.Groups = slices.Clone(t.Groups)
	if !slices.Contains(tt.Groups, DefaultGroup) {
		tt.Groups = append(tt.Groups, DefaultGroup)
	}
	slices.Sort(tt.Groups)
	tt.CreatedAtMs = nowMs
	s.Topics[t.Name] = &tt
	s.Version++
	b, _ := json.Marshal(&tt)
	return ResultOK, b
}

// DefaultGroup is the group every topic has.
const DefaultGroup = "default"

// updateTopic replaces a topic's settings, keeping its name, creation time
// and groups.
func (s *State) updateTopic(t *Topic) (uint64, []byte) {
	old, ok := s.Topics[t.Name]
	if !ok {
		return ResultNotFound, nil
	}
	nt := t.Clone()
	nt.CreatedAtMs, nt.Groups = old.CreatedAtMs, slices.Clone(old.Groups)
	s.Topics[t.Name] = nt
	s.Version++
	b, _ := json.Marshal(nt)
	return ResultOK, b
}

func (s *State) createGroup(topic, group string, ifNotExists bool) (uint64, []byte) {
	t, ok := s.Topics[topic]
	if !ok {
		return ResultNotFound, nil
	}
	if slices.Contains(t.Groups, group) {
		if ifNotExists {
			return ResultNoop, nil
		}
		return ResultExists, nil
	}
	t.Groups = append(t.Groups, group)
	slices.Sort(t.Groups)
	s.Version++
	return ResultOK, nil
}

func (s *State) deleteGroup(topic, group string) (uint64, []byte) {
	t, ok := s.Topics[topic]
	if !ok {
		return ResultNotFound, nil
	}
	i := slices.Index(t.Groups, group)
	if i < 0 {
		return ResultNotFound, nil
	}
	t.Groups = slices.Delete(t.Groups, i, i+1)
	s.Version++
	return ResultOK, nil
}
