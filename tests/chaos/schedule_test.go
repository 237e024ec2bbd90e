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
		faults := Schedule(seed, 2*time.Minute, 3, 2)
		var end time.Duration
		for _, f := range faults {
			if f.At < end {
				t.Fatalf("seed %d: %v starts before the previous fault ends at %v", seed, f, end)
			}
			end = f.At + f.Hold
			if end > 2*time.Minute {
				t.Fatalf("seed %d: %v ends after the run", seed, f)
			}
			if f.Kind == KillProxy {
				if f.Proxy < 1 || f.Proxy > 2 {
					t.Fatalf("seed %d: %v names a wrong proxy", seed, f)
				}
				continue
			}
			if f.Broker < 1 || f.Broker > 3 || (f.Kind == Partition && (f.Peer == f.Broker || f.Peer < 1 || f.Peer > 3)) {
				t.Fatalf("seed %d: %v names a wrong broker", seed, f)
			}
		}
	}
}

func TestScheduleMixesEveryKind(t *testing.T) {
	seen := map[Kind]int{}
	for seed := range uint64(20) {
		for _, f := range Schedule(seed, 5*time.Minute, 3, 2) {
			seen[f.Kind]++
			if f.Kind == TransferLeader && (f.Every < 200*time.Millisecond || f.Every >= time.Second) {
				t.Fatalf("seed %d: %v churns every %v, want 200ms-1s", seed, f, f.Every)
			}
		}
	}
	for _, k := range kinds {
		if seen[k] == 0 {
			t.Errorf("no %s fault in 20 seeds of 5 minutes (seen %v)", k, seen)
		}
	}
}
