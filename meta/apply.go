package meta

import (
	"encoding/json"
	"slices"
)

// Apply changes s by c and returns a result code and, for topics, the
// topic as stored. It is deterministic.
func (s *State) Apply(c *Command) (uint64, []byte) {
	switch c.Op {
	case OpRegisterNode:
		return s.registerNode(c.Node), nil
	case OpJoinNode:
		return s.joinNode(c.Node, c.ClusterID, c.JoinUse, c.NowMs)
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
		s.dropHandovers(c.Name)
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
	case OpSkipStep:
		return s.skipStep(c.OperationID, c.Step, c.Error, c.NowMs), nil
	case OpCancelOperation:
		return s.cancelOperation(c.OperationID, c.Error, c.NowMs)
	case OpNoteStep:
		return s.noteStep(c.OperationID, c.Step, c.Error), nil
	case OpDeclareDead:
		return s.declareDead(c.NodeID), nil
	case OpDeclareAlive:
		return s.declareAlive(c.NodeID), nil
	case OpSubmitAdmin:
		if len(c.Operations) != 1 {
			return ResultInvalid, nil
		}
		return s.submitAdmin(&c.Operations[0], c.IfNotExists, c.NowMs)
	case OpSetNodeState:
		return s.setNodeState(c.NodeID, c.NodeState, c.Force), nil
	case OpSetMetaVoter:
		return s.setMetaVoter(c.NodeID, c.MetaVoter), nil
	case OpAddShards:
		return s.addShards(c)
	case OpServeShards:
		return s.serveShards(c.Shards, c.NowMs), nil
	case OpSealHandover:
		return s.sealHandover(c.Name, c.Partition, c.NowMs), nil
	case OpCloseHandover:
		return s.closeHandover(c.Name, c.Partition), nil
	case OpCreateJoinToken:
		return s.createJoinToken(c.JoinToken, c.NowMs), nil
	case OpRevokeJoinToken:
		return s.revokeJoinToken(c.Name), nil
	case OpAuthBootstrap:
		return s.authBootstrap(c.Token, c.ReceiptKey, c.NowMs), nil
	case OpCreateToken:
		return s.createToken(c.Token, c.ReceiptKey, c.NowMs), nil
	case OpRevokeToken:
		return s.revokeToken(c.Name), nil
	case OpCreateRole:
		return s.createRole(c.Role, c.NowMs), nil
	case OpDeleteRole:
		return s.deleteRole(c.Name), nil
	case OpRotateReceiptKey:
		return s.rotateReceiptKey(c.ReceiptKey, c.NowMs), nil
	case OpStartBackup:
		return s.startBackup(c.Backup, c.NowMs), nil
	case OpRecordBackup:
		return s.recordBackup(c.Name, c.BackupFile, c.Capture, c.Error), nil
	case OpFinishBackup:
		return s.finishBackup(c.Name, c.Error, c.NowMs), nil
	case OpSetBackupSchedule:
		return s.setBackupSchedule(c.Schedule, c.NowMs), nil
	case OpRestoreCatalog:
		return s.restoreCatalog(c.Name, c.Catalog), nil
	}
	return ResultInvalid, nil
}

// registerNode adds or updates a node's record. A record with an
// incarnation is only updated by the same incarnation: ResultExists refuses
// a node id that came back on another data dir. A registered node keeps
// its state and meta vote (set_node_state and set_meta_voter change
// them, not the node's own registration); a removed node cannot register
// again (ResultInvalid). A registration whose start count is below the
// record's, or equal to it from another process (Run), is refused with
// ResultExists too: it comes from an older copy of the node's data dir.
func (s *State) registerNode(n *Node) uint64 {
	old, ok := s.Nodes[n.ID]
	nn := n.Clone()
	nn.BeforeDead = "" // meta's own, like the state
	if ok {
		if old.Incarnation != "" && old.Incarnation != n.Incarnation {
			return ResultExists
		}
		if n.Starts < old.Starts || (n.Starts == old.Starts && n.Starts > 0 && old.Run != "" && n.Run != old.Run) {
			return ResultExists // an older copy of the node's data dir
		}
		if old.State == NodeRemoved {
			return ResultInvalid
		}
		nn.State, nn.MetaVoter, nn.BeforeDead = old.State, old.MetaVoter, old.BeforeDead
		if old.Equal(nn) {
			return ResultNoop
		}
	}
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
// retried join gets the same answer. It refuses with ResultDenied a join
// whose token CheckJoinToken refuses at nowMs (before anything else, so
// the refusal tells nothing about the cluster), with ResultExists a node
// id registered with another data dir, and with ResultInvalid a cluster
// not bootstrapped yet or a data dir of another cluster. An admitted
// join spends a use of its token in this same entry.
func (s *State) joinNode(n *Node, clusterID string, use *JoinUse, nowMs int64) (uint64, []byte) {
	var retried *Node
	for _, id := range s.NodeIDs() {
		if old := s.Nodes[id]; old.Incarnation == n.Incarnation && (n.ID == 0 || n.ID == id) {
			retried = old
			break
		}
	}
	var retriedBy NodeID
	if retried != nil {
		retriedBy = retried.ID
	}
	if reason := s.CheckJoinToken(use, retriedBy, nowMs); reason != "" {
		return ResultDenied, deniedData(reason)
	}
	if s.ClusterID == "" || (clusterID != "" && clusterID != s.ClusterID) {
		return ResultInvalid, nil
	}
	if retried != nil {
		b, _ := json.Marshal(retried)
		return ResultNoop, b
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
	nn.State, nn.MetaVoter, nn.BeforeDead = NodeActive, false, ""
	s.Nodes[nn.ID] = nn
	s.spendJoinToken(use, nn.ID)
	s.Version++
	b, _ := json.Marshal(nn)
	return ResultOK, b
}

// declareDead marks an active or draining node dead: its replicas are then
// re-created elsewhere by repair operations. ResultNoop when it is dead
// already; ResultNotFound for an unknown node; ResultInvalid for a removed
// one.
func (s *State) declareDead(id NodeID) uint64 {
	n, ok := s.Nodes[id]
	switch {
	case !ok:
		return ResultNotFound
	case n.State == NodeDead:
		return ResultNoop
	case n.State == NodeRemoved:
		return ResultInvalid
	}
	n.State, n.BeforeDead = NodeDead, n.State
	s.Version++
	return ResultOK
}

// declareAlive brings a dead node back to the state it had when it was
// declared dead: active, or draining (a drain outlives a crash). The
// replicas removed from it while it was dead are no longer placed on it,
// so its host drops them. ResultNoop when the node is not dead;
// ResultNotFound when unknown.
func (s *State) declareAlive(id NodeID) uint64 {
	n, ok := s.Nodes[id]
	switch {
	case !ok:
		return ResultNotFound
	case n.State != NodeDead:
		return ResultNoop
	}
	n.State = NodeActive
	if n.BeforeDead == NodeDraining {
		n.State = NodeDraining
	}
	n.BeforeDead = ""
	s.Version++
	return ResultOK
}

// bootstrapShards applies bootstrap_shards, the command that bootstrapped
// clusters before add_shards did (each initial member proposed it; its
// shards served at once): it stays for the logs that hold it, applied as
// it was then. It creates count serving shards of rf replicas (at most one
// per active node, no zone spread) unless shards exist, and names the
// cluster clusterID unless it has a name; brokers now propose it only to
// name a cluster bootstrapped before cluster ids (count ignored: shards
// exist).
func (s *State) bootstrapShards(count, rf int, clusterID string) uint64 {
	if s.ClusterID == "" && clusterID != "" {
		s.ClusterID = clusterID
		if len(s.Shards) > 0 {
			s.Version++
			return ResultOK
		}
	}
	if len(s.Shards) > 0 {
		return ResultNoop
	}
	rf = min(rf, len(s.activeNodes()))
	if s.placeShards(count, rf, "", "") == nil {
		return ResultInvalid
	}
	s.Version++
	return ResultOK
}

func (s *State) createTopic(t *Topic, ifNotExists bool, nowMs int64) (uint64, []byte) {
	if old, ok := s.Topics[t.Name]; ok {
		if old.Deleting != 0 {
			b, _ := json.Marshal(old.Deleting)
			return ResultDeleting, b
		}
		b, _ := json.Marshal(old)
		if ifNotExists {
			return ResultNoop, b
		}
		return ResultExists, b
	}
	if len(s.Topics) >= MaxTopics || len(t.Groups) > MaxGroupsPerTopic {
		return ResultOverLimit, nil
	}
	tt := *t
	tt.Deleting = 0
	tt.Groups = slices.Clone(t.Groups)
	if !slices.Contains(tt.Groups, DefaultGroup) {
		tt.Groups = append(tt.Groups, DefaultGroup)
	}
	slices.Sort(tt.Groups)
	tt.CreatedAtMs = nowMs
	s.Topics[t.Name] = &tt
	s.createTopicGroups(&tt, nowMs)
	s.Version++
	b, _ := json.Marshal(&tt)
	return ResultOK, b
}

// DefaultGroup is the group every topic has.
const DefaultGroup = "default"

// updateTopic replaces a topic's settings, keeping its name, creation time
// and groups. A topic being deleted is not changed; its partition count
// does not change while shards are starting or one of its partitions
// hands over (ResultHandingOver): seeds and hand-overs were computed for
// the count they saw.
func (s *State) updateTopic(t *Topic) (uint64, []byte) {
	old, ok := s.Topics[t.Name]
	if !ok {
		return ResultNotFound, nil
	}
	if old.Deleting != 0 {
		return ResultDeleting, nil
	}
	if max(t.Partitions, 1) != max(old.Partitions, 1) && (len(s.StartingShards()) > 0 || slices.ContainsFunc(s.Handovers, func(h Handover) bool { return h.Topic == t.Name })) {
		return ResultHandingOver, nil
	}
	nt := t.Clone()
	nt.Deleting = 0
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
	if t.Deleting != 0 {
		return ResultDeleting, nil
	}
	if slices.Contains(t.Groups, group) {
		if ifNotExists {
			return ResultNoop, nil
		}
		return ResultExists, nil
	}
	if len(t.Groups) >= MaxGroupsPerTopic {
		return ResultOverLimit, nil
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
	if t.Deleting != 0 {
		return ResultDeleting, nil
	}
	i := slices.Index(t.Groups, group)
	if i < 0 {
		return ResultNotFound, nil
	}
	t.Groups = slices.Delete(t.Groups, i, i+1)
	s.Version++
	return ResultOK, nil
}
