package identity

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if _, found, err := Load(dir); found || err != nil {
		t.Fatalf("Load(missing dir) = found %v, error %v; want not found, nil", found, err)
	}
	id := New(3)
	id.ClusterID = "c1"
	if err := Save(dir, id); err != nil {
		t.Fatalf("Save() error = %v", err)
	}
	got, found, err := Load(dir)
	if err != nil || !found || got != id {
		t.Fatalf("Load() = %+v, %v, %v; want %+v, true, nil", got, found, err, id)
	}
	if New(3).Incarnation == id.Incarnation {
		t.Fatalf("two New() share incarnation %s", id.Incarnation)
	}
}

func TestLoadRefusesGarbage(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte(`{"node_id":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Load(dir); err == nil || !strings.Contains(err.Error(), FileName) || strings.Contains(err.Error(), "nil") {
		t.Fatalf("Load(identity without node id) error = %v, want one naming %s and what is missing", err, FileName)
	}
}

// A file that is not JSON at all keeps the decoder's error in the chain.
func TestLoadWrapsTheDecodeError(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := Load(dir)
	var syntax *json.SyntaxError
	if !errors.As(err, &syntax) || !strings.Contains(err.Error(), FileName) {
		t.Fatalf("Load(not json) error = %v, want a *json.SyntaxError in a message naming %s", err, FileName)
	}
}

func TestCheck(t *testing.T) {
	mine := &Identity{NodeID: 3, Incarnation: "aaaa", ClusterID: "c1"}
	unnamed := &Identity{NodeID: 3, Incarnation: "aaaa"}
	peerKnows := func(inc, cluster string) Peer {
		return Peer{NodeID: 1, Addr: "127.0.0.1:1", ClusterID: cluster, Known: map[uint64]string{1: "p1", 3: inc}}
	}
	newCluster := Peer{NodeID: 1, Addr: "127.0.0.1:1", Known: map[uint64]string{1: "p1"}}
	knowsStarts := func(n uint64) Peer {
		p := peerKnows("aaaa", "c1")
		p.Starts = map[uint64]uint64{1: 9, 3: n}
		return p
	}
	cases := []struct {
		name    string
		local   Local
		peers   []Peer
		want    error
		mention []string
	}{
		{name: "fresh node of a new cluster", local: Local{NodeID: 3}, peers: []Peer{newCluster}},
		{name: "fresh node, no peer answers", local: Local{NodeID: 3}},
		{name: "restart on its own data", local: Local{NodeID: 3, Identity: mine, HasData: true}, peers: []Peer{peerKnows("aaaa", "c1")}},
		{name: "restart before it saw the cluster id", local: Local{NodeID: 3, Identity: unnamed, HasData: true}, peers: []Peer{peerKnows("aaaa", "c1")}},
		{name: "data dir from before identities", local: Local{NodeID: 3, HasData: true}, peers: []Peer{peerKnows("", "c1")}},
		{name: "peer with a legacy record", local: Local{NodeID: 3, Identity: mine, HasData: true}, peers: []Peer{peerKnows("", "c1")}},
		{
			name: "another node's data dir", local: Local{NodeID: 2, DataDir: "/d/3", Identity: mine, HasData: true},
			want: ErrMismatch, mention: []string{"/d/3", "belongs to node 3", "configured as node 2"},
		},
		{
			name: "another cluster's data dir", local: Local{NodeID: 3, DataDir: "/d/3", Identity: mine, HasData: true}, peers: []Peer{newCluster, peerKnows("aaaa", "c2")},
			want: ErrMismatch, mention: []string{"cluster c1", "cluster c2", "127.0.0.1:1"},
		},
		{
			name: "wiped member", local: Local{NodeID: 3, DataDir: "/d/3"}, peers: []Peer{newCluster, peerKnows("aaaa", "c1")},
			want: ErrUnsafeRejoin, mention: []string{"/d/3 is empty", "node 3 is already a member", "new node id"},
		},
		{
			name: "wiped member with a legacy record", local: Local{NodeID: 3, DataDir: "/d/3"}, peers: []Peer{peerKnows("", "")},
			want: ErrUnsafeRejoin, mention: []string{"is empty"},
		},
		{
			name: "an old copy of the data dir", local: Local{NodeID: 3, DataDir: "/d/3", Identity: mine, HasData: true}, peers: []Peer{peerKnows("bbbb", "c1")},
			want: ErrUnsafeRejoin, mention: []string{"incarnation bbbb", "holds incarnation aaaa"},
		},
		{
			name: "restart after its last start", local: Local{NodeID: 3, Identity: &Identity{NodeID: 3, Incarnation: "aaaa", ClusterID: "c1", Starts: 4}, HasData: true},
			peers: []Peer{knowsStarts(4)},
		},
		{
			name: "a copy taken before the last start", local: Local{NodeID: 3, DataDir: "/d/3", Identity: &Identity{NodeID: 3, Incarnation: "aaaa", ClusterID: "c1", Starts: 3}, HasData: true},
			peers: []Peer{newCluster, knowsStarts(4)},
			want:  ErrBehind, mention: []string{"/d/3 is older", "start 3", "knows start 4", "remove-node --force 3", "--join"},
		},
		{
			name: "a copy from before start counts", local: Local{NodeID: 3, DataDir: "/d/3", Identity: mine, HasData: true},
			peers: []Peer{knowsStarts(1)},
			want:  ErrBehind, mention: []string{"start 0", "knows start 1"},
		},
		{
			name: "a removed node comes back", local: Local{NodeID: 3, DataDir: "/d/3", Identity: mine, HasData: true},
			peers: []Peer{{NodeID: 1, Addr: "127.0.0.1:1", ClusterID: "c1", Known: map[uint64]string{3: "aaaa"}, Removed: map[uint64]bool{3: true}}},
			want:  ErrRemoved, mention: []string{"node 3 was removed", "never reused", "--join"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.local, c.peers)
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("Check() = %v, want %v", err, c.want)
			}
			for _, m := range c.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("Check() = %q, want it to mention %q", err, m)
				}
			}
		})
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(`{"node_id":3,"incarnation":"aaaa","cluster_id":"c1"}`))
	f.Add([]byte(`{"node_id":3}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), b, 0o644); err != nil {
			t.Fatal(err)
		}
		id, found, err := Load(dir)
		if err != nil {
			return
		}
		if !found || id.NodeID == 0 || id.Incarnation == "" {
			t.Fatalf("Load(%q) = %+v, found %v, nil error; want an error or a complete identity", b, id, found)
		}
		if err := Save(dir, id); err != nil {
			t.Fatalf("Save() error = %v", err)
		}
		if again, _, err := Load(dir); err != nil || again != id {
			t.Fatalf("Load(Save(%+v)) = %+v, %v", id, again, err)
		}
	})
}
