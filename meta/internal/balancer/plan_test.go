package balancer

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/sundialmq/sundial/meta"
)

// TestPlanDeterministic plans on views of random clusters (with dead,
// draining and zoned nodes) given in shuffled orders: the plan is the same
// whatever the order, and every plan holds to its limits.
func TestPlanDeterministic(t *testing.T) {
	planned := 0
	defer func() {
		if planned == 0 {
			t.Errorf("no view planned anything: the test shows nothing")
		}
	}()
	for seed := range uint64(50) {
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 1))
			v := skewedCluster(seed, 12, 40, 3, 1+int(seed%3))
			states := []NodeState{NodeActive, NodeActive, NodeActive, NodeActive, NodeDraining, NodeDead}
			for i := range v.Nodes {
				v.Nodes[i].State = states[rng.IntN(len(states))]
				v.Nodes[i].DiskBytes = int64(rng.IntN(3))
			}
			cfg := DefaultConfig()
			cfg.MaxOperations = 1 + rng.IntN(20)
			want := Plan(v, cfg)
			planned += len(want)
			if len(want) > cfg.MaxOperations {
				t.Fatalf("Plan = %d operations, want at most %d", len(want), cfg.MaxOperations)
			}
			shards := map[meta.EventShardID]bool{}
			for _, op := range want {
				if shards[op.Shard] {
					t.Fatalf("Plan has two operations on shard %d: %v", op.Shard, want)
				}
				shards[op.Shard] = true
			}
			for range 5 {
				rng.Shuffle(len(v.Nodes), func(i, j int) { v.Nodes[i], v.Nodes[j] = v.Nodes[j], v.Nodes[i] })
				rng.Shuffle(len(v.Shards), func(i, j int) { v.Shards[i], v.Shards[j] = v.Shards[j], v.Shards[i] })
				for _, s := range v.Shards {
					rng.Shuffle(len(s.Replicas), func(i, j int) { s.Replicas[i], s.Replicas[j] = s.Replicas[j], s.Replicas[i] })
				}
				if got := Plan(v, cfg); !reflect.DeepEqual(got, want) {
					t.Fatalf("Plan of a shuffled view = %v, want %v", got, want)
				}
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*Config)
		ok   bool
	}{
		{"default", func(*Config) {}, true},
		{"no operations", func(c *Config) { c.MaxOperations = 0 }, false},
		{"no step timeout", func(c *Config) { c.Timeouts.Step = 0 }, false},
		{"no catch-up timeout", func(c *Config) { c.Timeouts.CatchUp = -1 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tt.edit(&cfg)
			if err := cfg.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok %v", err, tt.ok)
			}
		})
	}
}
