package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// startRefused starts a broker with cfg and expects Start to refuse it; it
// returns the error.
func startRefused(t *testing.T, cfg broker.Config) error {
	t.Helper()
	s, err := broker.New(cfg, logger(t).Named("refused"), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("broker.New() error = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = s.Start(ctx)
	if err == nil {
		s.Stop()
		t.Fatalf("Start() of node %d on %s = nil, want a refusal", cfg.NodeID, cfg.DataDir)
	}
	return err
}

// TestWipedBrokerIsRefused restarts a member on an empty data dir with its
// old node id. It would re-create its replicas with their old ids and empty
// logs (and could vote committed entries away): Start must refuse, saying
// what to do, and the cluster must go on serving.
func TestWipedBrokerIsRefused(t *testing.T) {
	c := New(t, Config{Shards: 2})
	const topic = "rejoin"
	acked := map[string]bool{}
	for i := range 20 {
		acked[publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})[0].MessageId] = true
	}
	wiped := 2
	c.StopBroker(wiped)
	cfg := c.Nodes[wiped].Config
	if err := os.RemoveAll(cfg.DataDir); err != nil {
		t.Fatalf("RemoveAll() error = %v", err)
	}

	err := startRefused(t, cfg)
	t.Logf("refused: %v", err)
	if !errors.Is(err, broker.ErrUnsafeRejoin) {
		t.Errorf("Start() error = %v, want %v", err, broker.ErrUnsafeRejoin)
	}
	for _, want := range []string{"node 3", "empty", cfg.DataDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start() error = %q, want it to mention %q", err, want)
		}
	}
	if entries, _ := os.ReadDir(cfg.DataDir); len(entries) > 0 {
		t.Errorf("refused Start() left %d entries in the data dir, want none", len(entries))
	}

	c.WaitReady()
	for i := 20; i < 30; i++ {
		acked[publish(t, c, &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i))})[0].MessageId] = true
	}
	sub := c.Subscribe(topic, "", 50, 0)
	drain(t, c, sub, acked, 30*time.Second)
}

// TestMismatchedIdentityIsRefused starts brokers on data dirs that are not
// theirs: another node's, and one of another cluster. Both are refused
// before anything is written, and the owner then starts on its data dir.
func TestMismatchedIdentityIsRefused(t *testing.T) {
	c := New(t, Config{Shards: 2})
	const owner = 2
	c.StopBroker(owner)
	own := c.Nodes[owner].Config
	identityFile := filepath.Join(own.DataDir, "identity.json")
	saved, err := os.ReadFile(identityFile)
	if err != nil {
		t.Fatalf("read identity file: %v", err)
	}
	var ident map[string]any
	if err := json.Unmarshal(saved, &ident); err != nil {
		t.Fatalf("decode identity file: %v", err)
	}
	if ident["node_id"] != float64(3) || ident["incarnation"] == "" || ident["cluster_id"] == nil {
		t.Fatalf("identity file = %s, want node 3 with an incarnation and the cluster id", saved)
	}

	other := c.Nodes[1].Config // node 2, pointed at node 3's data dir
	other.DataDir = own.DataDir
	err = startRefused(t, other)
	if !errors.Is(err, broker.ErrIdentityMismatch) {
		t.Errorf("Start() of node 2 on node 3's data dir = %v, want %v", err, broker.ErrIdentityMismatch)
	}
	for _, want := range []string{"belongs to node 3", "configured as node 2"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start() error = %q, want it to mention %q", err, want)
		}
	}

	ident["cluster_id"] = "another-cluster"
	forged, _ := json.Marshal(ident)
	if err := os.WriteFile(identityFile, forged, 0o644); err != nil {
		t.Fatal(err)
	}
	err = startRefused(t, own)
	if !errors.Is(err, broker.ErrIdentityMismatch) {
		t.Errorf("Start() on a data dir of another cluster = %v, want %v", err, broker.ErrIdentityMismatch)
	}
	for _, want := range []string{"cluster another-cluster", "initial_members"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Start() error = %q, want it to mention %q", err, want)
		}
	}

	if err := os.WriteFile(identityFile, saved, 0o644); err != nil {
		t.Fatal(err)
	}
	c.StartBroker(owner)
	c.StopBroker(0) // node 3 must now be part of every quorum
	c.WaitReady()
	publish(t, c, &sundialv1.Message{Topic: "mismatch", Payload: []byte("x")})
}
