// Package chaos runs the recorded workload (package workload) against a
// process cluster (package framework) under a seeded random schedule of
// faults, then heals, drains and checks the history (package checker).
//
// The schedule is a pure function of (seed, duration, brokers): the same
// seed gives the same faults at the same offsets, so a failing run is
// rerun with CHAOS_SEED. One fault is active at a time, so a quorum of a
// three-broker cluster always survives; what is tested is that the
// guarantees hold through leader changes, restarts and partitions, not
// that the cluster serves without a quorum.
//
// With two or more proxies, killing one leaves the others serving: the
// client's retries with the same request id land on another proxy.
//
// Leader-transfer churn (TransferLeader) moves shards' leadership on
// purpose through the public Cluster.TransferLeader RPC, the path an
// operator's shardctl transfer-leader takes: a leader hands over while it
// holds leases and has deliveries in flight, with no process or link
// fault at all. Killing, pausing and isolating leaders move them too.
package chaos

import (
	"fmt"
	"math/rand/v2"
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
)

var kinds = []Kind{Kill, Pause, Isolate, Partition, Slow, CutGRPC, KillProxy, TransferLeader}

// Fault is one scheduled fault.
type Fault struct {
	At      time.Duration // offset from the start of the run
	Kind    Kind
	Broker  int // node id
	Peer    int // the other broker of a Partition
	Proxy   int // the proxy of a KillProxy (1-based)
	Hold    time.Duration
	Latency time.Duration // Slow only
	Every   time.Duration // TransferLeader only: time between two transfers
}

func (f Fault) String() string {
	s := fmt.Sprintf("+%v %s broker-%d", f.At.Round(time.Millisecond), f.Kind, f.Broker)
	if f.Kind == KillProxy {
		s = fmt.Sprintf("+%v %s proxy-%d", f.At.Round(time.Millisecond), f.Kind, f.Proxy)
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
func Schedule(seed uint64, duration time.Duration, brokers, proxies int) []Fault {
	rng := rand.New(rand.NewPCG(seed, 0x5ced))
	var out []Fault
	at := 2*time.Second + time.Duration(rng.IntN(2000))*time.Millisecond
	for {
		f := Fault{At: at, Kind: kinds[rng.IntN(len(kinds))], Broker: 1 + rng.IntN(brokers),
			Hold: time.Second + time.Duration(rng.IntN(7000))*time.Millisecond}
		if f.Kind == Partition {
			f.Peer = 1 + (f.Broker+rng.IntN(brokers-1))%brokers
		}
		if f.Kind == KillProxy {
			f.Broker, f.Proxy = 0, 1+rng.IntN(proxies)
		}
		if f.Kind == Slow {
			f.Latency = time.Duration(5+rng.IntN(95)) * time.Millisecond
		}
		if f.Kind == TransferLeader {
			f.Every = time.Duration(200+rng.IntN(800)) * time.Millisecond
		}
		if f.At+f.Hold > duration {
			return out
		}
		out = append(out, f)
		at = f.At + f.Hold + time.Second + time.Duration(rng.IntN(3000))*time.Millisecond
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
