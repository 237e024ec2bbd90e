// Package chaos runs the recorded workload (package workload) against a
// process cluster (package framework) under a seeded random schedule of
// faults, then heals, drains and checks the history (package checker).
//
// The schedule is a pure function of (seed, duration, brokers): the same
// seed gives the same faults at the same offsets, so a failing run is
// rerun with CHAOS_SEED. One process or link fault is active at a time,
// so every shard (three replicas) and the meta group keep a quorum; what
// is tested is that the guarantees hold through leader changes, restarts,
// partitions and cluster operations, not that the cluster serves without
// a quorum.
//
// With two or more proxies, killing one leaves the others serving: the
// client's retries with the same request id land on another proxy.
//
// Leader-transfer churn (TransferLeader) moves shards' leadership on
// purpose through the public Cluster.TransferLeader RPC, the path an
// operator's shardctl transfer-leader takes: a leader hands over while it
// holds leases and has deliveries in flight, with no process or link
// fault at all. Killing, pausing and isolating leaders move them too.
//
// Cluster operations are faults too, through the public Cluster RPCs an
// operator's shardctl uses: a rebalance (Rebalance) submits replica moves
// and leadership transfers and returns, so the moves run under the faults
// that follow (a kill, pause or partition of a move's source or target);
// a drain (DrainNode until nothing is left, RemoveNode, the process
// stopped, a new broker with a new data dir joined, a rebalance next)
// replaces a broker for good; a shards add (AddShards) grows the ring
// and opens hand-overs. The schedule tracks the brokers a drain replaces,
// so no later fault names a removed broker.
package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"
)

// Kind is a fault.
type Kind string

// The faults.
const (
	Kill      Kind = "kill"       // SIGKILL a broker, restart it on the same data after Hold
	Pause     Kind = "pause"      // SIGSTOP a broker for Hold (past the election timeout), then SIGCONT
	Isolate   Kind = "isolate"    // cut a broker's Raft and gRPC links both ways for Hold
	Partition Kind = "partition"  // cut the links between two brokers for Hold
	Slow      Kind = "slow"       // delay every chunk sent to a broker by Latency for Hold
	CutGRPC   Kind = "cut-grpc"   // cut the proxies' connections to a broker's gRPC port for Hold
	KillProxy Kind = "kill-proxy" // SIGKILL a proxy, restart it after Hold
	// TransferLeader churns leaders for Hold: every Every, the next shard
	// (in id order) is asked to move its leadership to the next broker
	// (from Broker on, in turn).
	TransferLeader Kind = "transfer-leader"
	// Rebalance submits a rebalance and holds for Hold while its moves run;
	// they go on under the next faults. With Broker set (half of them), it
	// SIGKILLs that broker KillAfter into the hold and restarts it at the
	// end: a kill while the moves run. With CHAOS_KILL_DURING_MOVES=0 the
	// rebalance kills nothing and a kill fault waits for the moves to end.
	Rebalance Kind = "rebalance"
	// Drain drains Broker (DrainNode until it holds nothing), removes it
	// (RemoveNode), stops it for good and joins a new broker, node id
	// Peer, with a new data dir; the schedule follows it with a rebalance.
	// It takes as long as the drain does; Hold is the schedule's estimate.
	Drain Kind = "drain"
	// AddShards grows the ring by Count shards (AddShards) and holds for
	// Hold while the hand-overs run.
	AddShards Kind = "shards-add"
)

var kinds = []Kind{Kill, Pause, Isolate, Partition, Slow, CutGRPC, KillProxy, TransferLeader, Rebalance, Drain, AddShards}

// Bounds of the operation faults per run: each drain replaces a broker
// and each shards add grows the ring for good.
const (
	maxDrains    = 2
	maxAddShards = 2
	drainHold    = 20 * time.Second
)

// Fault is one scheduled fault.
type Fault struct {
	At      time.Duration // offset from the start of the run
	Kind    Kind
	Broker  int // node id
	Peer    int // the other broker of a Partition; the joining broker of a Drain
	Proxy   int // the proxy of a KillProxy (1-based)
	Hold    time.Duration
	Latency time.Duration // Slow only
	Every   time.Duration // TransferLeader only: time between two transfers
	Count   int           // AddShards only: shards added
	// KillAfter is when a Rebalance with Broker set kills it, from the
	// submit.
	KillAfter time.Duration
	// CancelAfter, when set (a third of the rebalances), is when a
	// Rebalance cancels the first unfinished operation (CancelOperation,
	// as `shardctl operations cancel` does), from the submit.
	CancelAfter time.Duration
}

func (f Fault) String() string {
	s := fmt.Sprintf("+%v %s broker-%d", f.At.Round(time.Millisecond), f.Kind, f.Broker)
	switch f.Kind {
	case KillProxy:
		s = fmt.Sprintf("+%v %s proxy-%d", f.At.Round(time.Millisecond), f.Kind, f.Proxy)
	case Rebalance:
		s = fmt.Sprintf("+%v %s", f.At.Round(time.Millisecond), f.Kind)
		if f.Broker != 0 {
			s += fmt.Sprintf(", kill broker-%d after %v", f.Broker, f.KillAfter.Round(time.Millisecond))
		}
		if f.CancelAfter != 0 {
			s += fmt.Sprintf(", cancel one after %v", f.CancelAfter.Round(time.Millisecond))
		}
	case AddShards:
		s = fmt.Sprintf("+%v %s %d", f.At.Round(time.Millisecond), f.Kind, f.Count)
	case Drain:
		s += fmt.Sprintf(", broker-%d joins", f.Peer)
	}
	if f.Kind == Partition {
		s += fmt.Sprintf("|broker-%d", f.Peer)
	}
	if f.Kind == Slow {
		s += fmt.Sprintf(" by %v", f.Latency)
	}
	if f.Kind == TransferLeader {
		s += fmt.Sprintf(" onwards, a shard every %v", f.Every)
	}
	return s + fmt.Sprintf(" for %v", f.Hold.Round(time.Millisecond))
}

// Schedule is the faults of a run of duration on brokers 1..brokers and
// proxies 1..proxies, from seed: one at a time, held 1-8 s, 1-4 s apart;
// a leader-transfer churn moves a leader every 0.2-1 s while it holds.
// The first fault is a rebalance (the joined brokers get replicas). At
// most maxDrains drains and maxAddShards shards adds happen (a pick past
// the bound is a rebalance); a drain is followed by a rebalance, and
// later faults name the broker that joined in place of the drained one.
func Schedule(seed uint64, duration time.Duration, brokers, proxies int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x5ced))
	live := make([]int, brokers)
	for i := range live {
		live[i] = i + 1
	}
	next := brokers + 1
	var out []Fault
	var drains, adds int
	at := 2*time.Second + time.Duration(rng.IntN(2000))*time.Millisecond
	// The joined brokers hold nothing until a rebalance: the first fault
	// is one, so drains and kills later in the run hit brokers with
	// replicas whichever the seed.
	first := Fault{At: at, Kind: Rebalance, Hold: time.Second + time.Duration(rng.IntN(7000))*time.Millisecond}
	killDuringMoves(rng, &first, live)
	if first.At+first.Hold > duration {
		return nil
	}
	out = append(out, first)
	at = first.At + first.Hold + time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
	for {
		f := Fault{At: at, Kind: kinds[rng.IntN(len(kinds))], Broker: live[rng.IntN(len(live))],
			Hold: time.Second + time.Duration(rng.IntN(7000))*time.Millisecond}
		if (f.Kind == Drain && drains == maxDrains) || (f.Kind == AddShards && adds == maxAddShards) {
			f.Kind = Rebalance
		}
		switch f.Kind {
		case Partition:
			others := slices.DeleteFunc(slices.Clone(live), func(id int) bool { return id == f.Broker })
			f.Peer = others[rng.IntN(len(others))]
		case KillProxy:
			f.Broker, f.Proxy = 0, 1+rng.IntN(proxies)
		case Slow:
			f.Latency = time.Duration(5+rng.IntN(95)) * time.Millisecond
		case TransferLeader:
			f.Every = time.Duration(200+rng.IntN(800)) * time.Millisecond
		case Rebalance:
			killDuringMoves(rng, &f, live)
		case AddShards:
			f.Broker, f.Count = 0, 1+rng.IntN(4)
		case Drain:
			f.Peer, f.Hold = next, drainHold
		}
		if f.At+f.Hold > duration {
			return out
		}
		out = append(out, f)
		at = f.At + f.Hold + time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
		switch f.Kind {
		case AddShards:
			adds++
		case Drain:
			drains++
			live = append(slices.DeleteFunc(live, func(id int) bool { return id == f.Broker }), next)
			next++
			// The replacement gets replicas at once: a rebalance after the join.
			r := Fault{At: at, Kind: Rebalance, Hold: time.Second + time.Duration(rng.IntN(7000))*time.Millisecond}
			killDuringMoves(rng, &r, live)
			if r.At+r.Hold > duration {
				return out
			}
			out = append(out, r)
			at = r.At + r.Hold + time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
		}
	}
}

// killDuringMoves makes half the rebalances kill a live broker 0.2-1 s
// after the submit (within the hold), the others kill nothing.
func killDuringMoves(rng *rand.Rand, f *Fault, live []int) {
	f.Broker = 0
	if rng.IntN(2) == 0 {
		f.Broker = live[rng.IntN(len(live))]
		f.KillAfter = min(f.Hold/2, time.Duration(200+rng.IntN(800))*time.Millisecond)
	}
	f.CancelAfter = 0
	if rng.IntN(3) == 0 {
		f.CancelAfter = min(f.Hold/2, time.Duration(100+rng.IntN(800))*time.Millisecond)
	}
}

// Count is the number of faults per kind, as "kill=3 pause=1 …".
func Count(faults []Fault) string {
	n := map[Kind]int{}
	for _, f := range faults {
		n[f.Kind]++
	}
	var parts []string
	for _, k := range kinds {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
