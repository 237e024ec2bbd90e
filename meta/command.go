package meta

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Op names a command.
type Op string

// The ops Apply knows, with the Command fields each reads: register_node
// (Node), bootstrap_shards (Count, RF, ClusterID), create_topic (Topic,
// IfNotExists), update_topic (Topic), delete_topic (Name), create_group (Name, Group,
// IfNotExists), delete_group (Name, Group), join_node (Node, ClusterID),
// submit_operations (Operations), start_operation (OperationID),
// advance_operation (OperationID, Step), finish_operation (OperationID,
// Status, Error), skip_step (OperationID, Step, Error: the outcome),
// cancel_operation (OperationID, Error: who asked), note_step
// (OperationID, Step, Error: the failed attempt), declare_dead (NodeID), declare_alive (NodeID),
// submit_admin (Operations: one admin operation, IfNotExists for
// create-group), set_node_state (NodeID, NodeState, Force),
// set_meta_voter (NodeID, MetaVoter), add_shards (Count, ZoneLabel,
// Bootstrap; with Bootstrap RF and ClusterID too), serve_shards
// (Shards), seal_handover and close_handover (Name, Partition);
// join_node also reads JoinUse, the join-token ops are in jointoken.go,
// and the auth ops in auth.go.
const (
	OpRegisterNode    Op = "register_node"
	OpBootstrapShards Op = "bootstrap_shards"
	OpCreateTopic     Op = "create_topic"
	OpUpdateTopic     Op = "update_topic"
	OpDeleteTopic     Op = "delete_topic"
	OpCreateGroup     Op = "create_group"
	OpDeleteGroup     Op = "delete_group"
	OpJoinNode        Op = "join_node"

	OpSubmitOperations Op = "submit_operations"
	OpStartOperation   Op = "start_operation"
	OpAdvanceOperation Op = "advance_operation"
	OpFinishOperation  Op = "finish_operation"
	OpSkipStep         Op = "skip_step"
	OpCancelOperation  Op = "cancel_operation"
	OpNoteStep         Op = "note_step"

	OpDeclareDead   Op = "declare_dead"
	OpDeclareAlive  Op = "declare_alive"
	OpSubmitAdmin   Op = "submit_admin"
	OpSetNodeState  Op = "set_node_state"
	OpSetMetaVoter  Op = "set_meta_voter"
	OpAddShards     Op = "add_shards"
	OpServeShards   Op = "serve_shards"
	OpSealHandover  Op = "seal_handover"
	OpCloseHandover Op = "close_handover"

	// Backups (backup.go): start_backup stores Backup as the running run;
	// record_backup records, for the run named by Name, the catalog file
	// (BackupFile) or a shard's capture (Capture), or notes Error as its
	// last failed try; finish_backup ends the run, failed when Error is
	// set; restore_catalog installs Catalog of the backup named by Name
	// into a cluster with no topics.
	OpStartBackup    Op = "start_backup"
	OpRecordBackup   Op = "record_backup"
	OpFinishBackup   Op = "finish_backup"
	OpRestoreCatalog Op = "restore_catalog"
	// set_backup_schedule sets Schedule (nil clears it).
	OpSetBackupSchedule Op = "set_backup_schedule"
)

// Command is one change to the metadata. Exactly the fields of its Op are
// set; NowMs is stamped by the proposer.
type Command struct {
	Op    Op    `json:"op"`
	NowMs int64 `json:"now_ms,omitempty"`

	Node *Node `json:"node,omitempty"`

	// add_shards: create Count shards, spread across the values of node
	// label ZoneLabel (none when empty; see meta.ZoneLabel); with
	// Bootstrap, the cluster's first shards (none once shards exist), of
	// RF replicas each, naming the cluster ClusterID. bootstrap_shards
	// (logs of older brokers, and naming a cluster bootstrapped before
	// cluster ids): Count, RF, ClusterID. Join: the cluster id the
	// joining data dir holds, empty if none.
	Count     int    `json:"count,omitempty"`
	RF        int    `json:"rf,omitempty"`
	ClusterID string `json:"cluster_id,omitempty"`
	ZoneLabel string `json:"zone_label,omitempty"`
	Bootstrap bool   `json:"bootstrap,omitempty"`

	Topic       *Topic `json:"topic,omitempty"`
	IfNotExists bool   `json:"if_not_exists,omitempty"`

	// Topic and group names for delete_topic, create_group, delete_group.
	Name  string `json:"name,omitempty"`
	Group string `json:"group,omitempty"`

	// Operations to submit, as planned (no ids).
	Operations []Operation `json:"operations,omitempty"`
	// OperationID names the operation start, advance and finish change;
	// Step is the index of the step advance_operation completes (and
	// skip_step skips); Status (failed or rolled-back) and Error are how
	// finish_operation ends it; Error is also skip_step's outcome,
	// note_step's failed attempt and who asked for a cancel_operation.
	OperationID OperationID     `json:"operation_id,omitempty"`
	Step        int             `json:"step,omitempty"`
	Status      OperationStatus `json:"status,omitempty"`
	Error       string          `json:"error,omitempty"`

	// NodeID names the node declare_dead, declare_alive, set_node_state and
	// set_meta_voter change;
	// NodeState is the state it moves to; Force removes a node that still
	// holds replicas (one that is dead or unreachable); MetaVoter is
	// whether the node votes in the meta group.
	NodeID    NodeID    `json:"node_id,omitempty"`
	NodeState NodeState `json:"node_state,omitempty"`
	Force     bool      `json:"force,omitempty"`
	MetaVoter bool      `json:"meta_voter,omitempty"`
	// Shards are the starting shards serve_shards puts on the ring;
	// Partition (with Name, the topic) is the hand-over seal_handover
	// and close_handover change.
	Shards    []EventShardID `json:"shards,omitempty"`
	Partition uint32         `json:"partition,omitempty"`

	// JoinToken is the token create_join_token stores; JoinUse the token
	// a join_node presents (jointoken.go).
	JoinToken *JoinToken `json:"join_token,omitempty"`
	JoinUse   *JoinUse   `json:"join_use,omitempty"`
	// The auth ops' token, role and receipt key (auth.go); Name names
	// the token revoke_token and the role delete_role remove.
	Token      *Token      `json:"token,omitempty"`
	Role       *Role       `json:"role,omitempty"`
	ReceiptKey *ReceiptKey `json:"receipt_key,omitempty"`

	// The backup ops' run, catalog file, shard capture and catalog
	// (backup.go).
	Backup     *BackupRun      `json:"backup,omitempty"`
	BackupFile *BackupFile     `json:"backup_file,omitempty"`
	Capture    *ShardCapture   `json:"capture,omitempty"`
	Catalog    *Catalog        `json:"catalog,omitempty"`
	Schedule   *BackupSchedule `json:"schedule,omitempty"`
}

// Result codes returned in the entry result's Value.
const (
	ResultOK uint64 = iota
	ResultExists
	ResultInvalid
	ResultNoop
	ResultNotFound
	// ResultBusy: another admin operation on the topic is unfinished; the
	// data is its id (JSON).
	ResultBusy
	// ResultDeleting: the topic is being deleted; the data, when set, is
	// the id of the delete-topic operation (JSON).
	ResultDeleting
	// ResultHoldsReplicas refuses to remove a node that still holds
	// replicas, or has operations unfinished, or (even with force) is the
	// last live holder of a shard.
	ResultHoldsReplicas
	// ResultHandingOver refuses to change a topic's partition count while
	// shards are starting or a partition of the topic hands over.
	ResultHandingOver
	// ResultCannotCancel refuses to cancel an operation; the data is the
	// reason (a JSON string).
	ResultCannotCancel
	// ResultOverLimit refuses a topic past MaxTopics or a group past
	// MaxGroupsPerTopic.
	ResultOverLimit
)

// Caps on what the cluster holds, whoever creates it (explicitly or by a
// first publish, Receive or Subscribe): each topic and group costs every
// replica of every shard state and every proxy a routing entry, so a
// runaway client cannot grow them without bound.
const (
	MaxTopics         = 10_000
	MaxGroupsPerTopic = 1_000
)

// ErrMalformedCommand is returned for bytes that are not a command.
var ErrMalformedCommand = errors.New("meta: malformed command")

// Encode serializes c.
func (c *Command) Encode() []byte {
	b, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("meta: encode command: %v", err)) // only plain data: cannot fail
	}
	return b
}

// DecodeCommand parses bytes made by Encode.
func DecodeCommand(b []byte) (*Command, error) {
	var c Command
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformedCommand, err)
	}
	switch c.Op {
	case OpRegisterNode:
		if c.Node == nil || c.Node.ID == 0 {
			return nil, fmt.Errorf("%w: register_node without a node", ErrMalformedCommand)
		}
	case OpJoinNode:
		if c.Node == nil || c.Node.RaftAddr == "" || c.Node.GRPCAddr == "" || c.Node.Incarnation == "" {
			return nil, fmt.Errorf("%w: join_node needs a node with addresses and an incarnation", ErrMalformedCommand)
		}
	case OpBootstrapShards:
		if c.Count < 1 || c.RF < 1 {
			return nil, fmt.Errorf("%w: bootstrap_shards needs count and rf", ErrMalformedCommand)
		}
	case OpCreateTopic, OpUpdateTopic:
		if c.Topic == nil || c.Topic.Name == "" {
			return nil, fmt.Errorf("%w: %s without a topic", ErrMalformedCommand, c.Op)
		}
	case OpDeleteTopic:
		if c.Name == "" {
			return nil, fmt.Errorf("%w: delete_topic without a name", ErrMalformedCommand)
		}
	case OpCreateGroup, OpDeleteGroup:
		if c.Name == "" || c.Group == "" {
			return nil, fmt.Errorf("%w: %s without topic and group", ErrMalformedCommand, c.Op)
		}
	case OpSubmitOperations:
		if len(c.Operations) == 0 {
			return nil, fmt.Errorf("%w: submit_operations without operations", ErrMalformedCommand)
		}
	case OpSubmitAdmin:
		if len(c.Operations) != 1 || !c.Operations[0].Kind.Admin() || c.Operations[0].Topic == "" {
			return nil, fmt.Errorf("%w: submit_admin needs one admin operation naming a topic", ErrMalformedCommand)
		}
	case OpStartOperation, OpAdvanceOperation:
		if c.OperationID == 0 || c.Step < 0 {
			return nil, fmt.Errorf("%w: %s without an operation id and step", ErrMalformedCommand, c.Op)
		}
	case OpFinishOperation:
		if c.OperationID == 0 || (c.Status != OperationFailed && c.Status != OperationRolledBack) {
			return nil, fmt.Errorf("%w: finish_operation needs an operation id and status failed or rolled-back", ErrMalformedCommand)
		}
	case OpSkipStep:
		if c.OperationID == 0 || c.Step < 0 || c.Error == "" {
			return nil, fmt.Errorf("%w: skip_step needs an operation id, a step and its outcome", ErrMalformedCommand)
		}
	case OpNoteStep:
		if c.OperationID == 0 || c.Step < 0 || c.Error == "" {
			return nil, fmt.Errorf("%w: note_step needs an operation id, a step and the failed attempt", ErrMalformedCommand)
		}
	case OpCancelOperation:
		if c.OperationID == 0 || c.Error == "" {
			return nil, fmt.Errorf("%w: cancel_operation needs an operation id and who asked", ErrMalformedCommand)
		}
	case OpStartBackup:
		if c.Backup == nil || c.Backup.ID == "" {
			return nil, fmt.Errorf("%w: start_backup without a run", ErrMalformedCommand)
		}
	case OpRecordBackup, OpFinishBackup:
		if c.Name == "" {
			return nil, fmt.Errorf("%w: %s without a run id", ErrMalformedCommand, c.Op)
		}
	case OpSetBackupSchedule: // a nil schedule clears it
	case OpRestoreCatalog:
		if c.Catalog == nil {
			return nil, fmt.Errorf("%w: restore_catalog without a catalog", ErrMalformedCommand)
		}
	case OpDeclareDead, OpDeclareAlive:
		if c.NodeID == 0 {
			return nil, fmt.Errorf("%w: %s without a node id", ErrMalformedCommand, c.Op)
		}
	case OpSetNodeState:
		switch c.NodeState {
		case NodeActive, NodeDraining, NodeRemoved:
		default: // dead is declared by the meta leader, not set
			return nil, fmt.Errorf("%w: set_node_state to unknown state %q", ErrMalformedCommand, c.NodeState)
		}
		if c.NodeID == 0 {
			return nil, fmt.Errorf("%w: set_node_state without a node id", ErrMalformedCommand)
		}
	case OpSetMetaVoter:
		if c.NodeID == 0 {
			return nil, fmt.Errorf("%w: set_meta_voter without a node id", ErrMalformedCommand)
		}
	case OpAddShards:
		limit := MaxAddShards
		if c.Bootstrap {
			limit = MaxBootstrapShards
		}
		if c.Count < 1 || c.Count > limit || c.Bootstrap && c.RF < 1 {
			return nil, fmt.Errorf("%w: add_shards needs a count in 1..%d (and rf for a bootstrap)", ErrMalformedCommand, limit)
		}
	case OpServeShards:
		if len(c.Shards) == 0 {
			return nil, fmt.Errorf("%w: serve_shards without shards", ErrMalformedCommand)
		}
	case OpSealHandover, OpCloseHandover:
		if c.Name == "" {
			return nil, fmt.Errorf("%w: %s without a topic", ErrMalformedCommand, c.Op)
		}
	case OpCreateJoinToken:
		if c.JoinToken == nil || c.JoinToken.ID == "" || c.JoinToken.Hash == "" || c.JoinToken.Uses < 0 {
			return nil, fmt.Errorf("%w: create_join_token needs a token with an id, a hash and uses >= 0", ErrMalformedCommand)
		}
	case OpRevokeJoinToken:
		if c.Name == "" {
			return nil, fmt.Errorf("%w: revoke_join_token without a token id", ErrMalformedCommand)
		}
	case OpAuthBootstrap, OpCreateToken, OpRevokeToken, OpCreateRole, OpDeleteRole, OpRotateReceiptKey:
		if err := c.checkAuthCommand(); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: unknown op %q", ErrMalformedCommand, c.Op)
	}
	return &c, nil
}
