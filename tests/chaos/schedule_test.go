package chaos

import (
	"slices"
	"testing"
	"time"
)

func TestScheduleIsAPureFunctionOfTheSeed(t *testing.T) {
	a := Schedule(42, 5*time.Minute, 3, 2)
	b := Schedule(42, 5*time.Minute, 3, 2)
	if !slices.Equal(a, b) {
		t.Fatalf("Schedule(42) differs between calls:\n%v\n%v", a, b)
	}
	if c := Schedule(43, 5*time.Minute, 3, 2); slices.Equal(a, c) {
		t.Fatalf("Schedule(43) = Schedule(42)")
	}
	if len(a) < 20 {
		t.Fatalf("Schedule(42, 5m) has %d faults, want at least 20", len(a))
	}
}

func TestScheduleHasOneFaultAtATimeWithinTheRun(t *testing.T) {
	for seed := range uint64(50) {
		faults := Schedule(seed, 2*time.Minute, 5, 2)
		live := map[int]bool{1: true, 2: true, 3: true, 4: true, 5: true}
		var end time.Duration
		for _, f := range faults {
			if f.At < end {
				t.Fatalf("seed %d: %v starts before the previous fault ends at %v", seed, f, end)
			}
			end = f.At + f.Hold
			if end > 2*time.Minute {
				t.Fatalf("seed %d: %v ends after the run", seed, f)
			}
			switch f.Kind {
			case KillProxy:
				if f.Proxy < 1 || f.Proxy > 2 {
					t.Fatalf("seed %d: %v names a wrong proxy", seed, f)
				}
				continue
			case Rebalance:
				if f.Broker == 0 {
					continue
				}
				if f.KillAfter <= 0 || f.KillAfter >= f.Hold {
					t.Fatalf("seed %d: %v kills outside its hold", seed, f)
				}
			case AddShards:
				if f.Count < 1 || f.Count > 4 {
					t.Fatalf("seed %d: %v adds %d shards, want 1-4", seed, f, f.Count)
				}
				continue
			}
			if !live[f.Broker] || (f.Kind == Partition && (f.Peer == f.Broker || !live[f.Peer])) {
				t.Fatalf("seed %d: %v names a broker not in the cluster (%v)", seed, f, live)
			}
			if f.Kind == Drain {
				if live[f.Peer] {
					t.Fatalf("seed %d: %v joins a broker already in the cluster", seed, f)
				}
				delete(live, f.Broker)
				live[f.Peer] = true
			}
		}
	}
}

// A drain replaces a broker for good and a shards add grows the ring for
// good: each is bounded per run, and a drain's replacement gets replicas
// from the rebalance that follows it.
func TestScheduleBoundsOperations(t *testing.T) {
	for seed := range uint64(50) {
		faults := Schedule(seed, 10*time.Minute, 5, 2)
		if faults[0].Kind != Rebalance {
			t.Fatalf("seed %d: the first fault is %v, want a rebalance (the joined brokers hold nothing before one)", seed, faults[0])
		}
		n := map[Kind]int{}
		for i, f := range faults {
			n[f.Kind]++
			if f.Kind == Drain && i+1 < len(faults) && faults[i+1].Kind != Rebalance {
				t.Fatalf("seed %d: %v is followed by %v, want a rebalance", seed, f, faults[i+1])
			}
		}
		if n[Drain] > maxDrains || n[AddShards] > maxAddShards {
			t.Fatalf("seed %d: %d drains and %d shards adds in 10 minutes, want at most %d and %d", seed, n[Drain], n[AddShards], maxDrains, maxAddShards)
		}
	}
}

func TestScheduleMixesEveryKind(t *testing.T) {
	seen := map[Kind]int{}
	for seed := range uint64(20) {
		for _, f := range Schedule(seed, 5*time.Minute, 5, 2) {
			seen[f.Kind]++
			if f.Kind == Rebalance && f.Broker != 0 {
				seen["rebalance-kill"]++
			}
			if f.Kind == Rebalance && f.CancelAfter != 0 {
				seen["rebalance-cancel"]++
				if f.CancelAfter >= f.Hold {
					t.Fatalf("seed %d: %v cancels after its hold", seed, f)
				}
			}
			if f.Kind == TransferLeader && (f.Every < 200*time.Millisecond || f.Every >= time.Second) {
				t.Fatalf("seed %d: %v churns every %v, want 200ms-1s", seed, f, f.Every)
			}
		}
	}
	if seen["rebalance-kill"] == 0 {
		t.Errorf("no rebalance with a kill during its moves in 20 seeds of 5 minutes")
	}
	if seen["rebalance-cancel"] == 0 {
		t.Errorf("no rebalance with a cancel during its moves in 20 seeds of 5 minutes")
	}
	for _, k := range kinds {
		if seen[k] == 0 {
			t.Errorf("no %s fault in 20 seeds of 5 minutes (seen %v)", k, seen)
		}
	}
}
