// Package identity keeps a broker's identity in its data dir and decides,
// before any replica starts, whether the data dir may serve as this node.
//
// A Raft replica that comes back under its old id with an empty log can vote
// committed entries away: a member restarted on a wiped data dir is the
// classic way to lose them. So the first start on a data dir writes an
// identity file (node id, a random incarnation id, and later the cluster id
// of the first bootstrap), and every start compares the configured node id,
// the identity file and what the peers' meta replicas know (Check). Each
// start also counts itself in the identity file and in the meta state, so
// a copy of the data dir taken before the node's last start is refused
// before Dragonboat reads its stale Raft log. The
// meta state keeps each node's incarnation too, and refuses a second one
// (see meta.Node.Incarnation), in case no peer answered at start.
//
// Nothing here runs concurrently: the broker loads, checks and saves before
// it starts the NodeHost, and the host's loop records the cluster id.
package identity

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// FileName is the identity file inside a data dir.
const FileName = "identity.json"

// Errors of Check; the errors returned wrap one of them and say what to do.
var (
	// ErrMismatch: the data dir belongs to another node or cluster.
	ErrMismatch = errors.New("identity: data dir belongs to another node or cluster")
	// ErrUnsafeRejoin: the node is a known member, but this data dir is not
	// the one it ran on (empty, or another incarnation).
	ErrUnsafeRejoin = errors.New("identity: unsafe rejoin")
	// ErrRemoved: the node id was removed from the cluster; a removed id
	// never comes back.
	ErrRemoved = errors.New("identity: node removed from the cluster")
	// ErrBehind: the data dir is an older copy of the one the node last ran
	// on (a copy or a restored backup of its own data dir). Check finds it
	// by the start count; Dragonboat finds the rest when the Raft log meets
	// a leader that remembers more (the broker's host package).
	ErrBehind = errors.New("data dir older than this node's last state")
)

// Identity is what a data dir says about the node it belongs to.
type Identity struct {
	NodeID uint64 `json:"node_id"`
	// Incarnation is random, chosen when the data dir was first used.
	Incarnation string `json:"incarnation"`
	// ClusterID is the cluster's id from its first bootstrap; empty until
	// this node has seen it.
	ClusterID string `json:"cluster_id,omitempty"`
	// Starts counts the node's starts on this data dir: every start adds
	// one and saves it before any replica opens, then registers it with the
	// meta state (meta.Node.Starts). A data dir whose count is below the
	// one the cluster knows is an older copy of the node's data dir.
	Starts uint64 `json:"starts,omitempty"`
}

// New is the identity of a data dir used for the first time by node.
func New(node uint64) Identity {
	b := make([]byte, 16)
	rand.Read(b) // never fails (crypto/rand)
	return Identity{NodeID: node, Incarnation: hex.EncodeToString(b)}
}

// Load reads the identity of dir; found is false if dir has none.
func Load(dir string) (id Identity, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, os.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("identity: read %s: %w", filepath.Join(dir, FileName), err)
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return Identity{}, false, fmt.Errorf("identity: %s is not an identity file (%w): restore it, or move the data dir away", filepath.Join(dir, FileName), err)
	}
	if id.NodeID == 0 || id.Incarnation == "" {
		return Identity{}, false, fmt.Errorf("identity: %s is not an identity file (no node id or incarnation): restore it, or move the data dir away", filepath.Join(dir, FileName))
	}
	return id, true, nil
}

// Save writes id into dir (created if needed), atomically and durably.
func Save(dir string, id Identity) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("identity: encode: %w", err)
	}
	tmp := filepath.Join(dir, FileName+".tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("identity: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, FileName)); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("identity: sync %s: %w", dir, err)
	}
	return nil
}

// HasData reports whether dir holds a broker's Raft log or state DB: a data
// dir from before identity files, if it has no identity.
func HasData(dir string) bool {
	for _, sub := range []string{"raft", "state"} {
		if _, err := os.Stat(filepath.Join(dir, sub)); err == nil {
			return true
		}
	}
	return false
}

// NewRunID is a random id of one broker process (meta.Node.Run).
func NewRunID() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// NewClusterID is a random cluster id, proposed with the first bootstrap.
func NewClusterID() string {
	b := make([]byte, 8)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
