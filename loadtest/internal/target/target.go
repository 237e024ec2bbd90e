// Package target implements scenario.System for Sundial and for the peer
// systems loadtest compares it with: Redis (sorted-set delayed queue with a
// Lua claim script), beanstalkd (delayed put, reserve/delete) and NATS
// JetStream (message schedules). Each starts its own server process(es) on
// loopback from binaries (Sundial's from bin/, the peers' from PATH) in a
// private data directory, and stops them by pid in Close.
//
// Every system gets the same client shape from the scenario (producers,
// batch depth, consumer workers and prefetch); each uses its natural
// client to honor it. Sundial's is also a scenario.Backupper (its Backups
// service, sundial_backup.go). An Instance is safe for the concurrent Publish and
// Consume calls scenarios make; Restart and Close are called alone.
package target

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proc"
)

// Spec names one system configuration a benchmark runs.
type Spec struct {
	// Name is the short id used on the command line, e.g. "redis-always".
	Name string
	// System and Config are what reports print.
	System string
	Config string
	// Binary is the server binary; empty for Sundial (built from source).
	Binary string
	// Durable reports whether an acknowledged publish survives a power
	// loss on every copy (fsync before the ack).
	Durable bool
	// SundialBrokers is the number of Sundial brokers (replication factor
	// min(3, brokers)); 0 for the peers.
	SundialBrokers int
	// TLS runs the Sundial cluster with TLS on every hop (cluster.Config.TLS)
	// and the proxy's authentication (cluster.Config.Auth): security on.
	TLS bool

	start func(ctx context.Context, spec Spec, opts Options) (Instance, error)
}

// Options says where and how to start a system.
type Options struct {
	// Dir is a directory for the server's data and logs; it must exist.
	Dir string
	// SundialBinDir holds sundial-broker and sundial-proxy (built when
	// missing); empty: <repo>/bin.
	SundialBinDir string
	// Brokers and Shards shape the Sundial cluster; defaults the spec's
	// SundialBrokers (else 3) and 8.
	Brokers, Shards int
	// NoRequestIDs makes Sundial publishes carry no request id: the broker
	// keeps no dedup record, and a retried batch could be stored twice.
	NoRequestIDs bool
	// Partitions of the Sundial topic; 0: one per shard.
	Partitions int
	// Topic (Sundial), key prefix (Redis), tube (beanstalkd) or stream
	// (NATS) used; default "loadtest".
	Queue string
}

func (o Options) queue() string {
	if o.Queue == "" {
		return "loadtest"
	}
	return o.Queue
}

// Instance is a started system.
type Instance interface {
	scenario.System
	// Close stops every server process by pid and closes the clients.
	Close() error
}

// ProcessGroup is the server processes of a system that play one role.
type ProcessGroup struct {
	Role string
	Pids []int
}

// Endpoint is a server process's HTTP address serving /metrics and
// /debug/pprof (Sundial's brokers and proxy).
type Endpoint struct {
	Role string
	// Name tells the process apart within its role, e.g. "broker-2".
	Name string
	Addr string
	// PprofAddr serves /debug/pprof when Addr does not (the proxy's and
	// the brokers' admin listeners); empty means Addr.
	PprofAddr string
}

// Pprof is the address serving the endpoint's /debug/pprof.
func (e Endpoint) Pprof() string {
	if e.PprofAddr != "" {
		return e.PprofAddr
	}
	return e.Addr
}

// Roles of a Sundial system's server processes (CPUGroups).
const (
	RoleBrokers = "brokers"
	RoleProxy   = "proxy"
)

// Specs are every configuration, Sundial first.
var Specs = []Spec{
	{Name: "sundial", System: "Sundial", Config: "3 brokers, RF 3, 8 shards, 1 proxy", Durable: true, SundialBrokers: 3, start: startSundial},
	{Name: "sundial-tls", System: "Sundial", Config: "3 brokers, RF 3, 8 shards, 1 proxy, TLS on every hop (clients, proxy → brokers, brokers, Raft mutual TLS) and bearer tokens (every call authenticated, receipts signed)", Durable: true, SundialBrokers: 3, TLS: true, start: startSundial},
	{Name: "sundial-rf1", System: "Sundial", Config: "1 broker, RF 1 (one fsynced copy), 8 shards, 1 proxy", Durable: true, SundialBrokers: 1, start: startSundial},
	{Name: "redis-always", System: "Redis", Config: "AOF appendfsync always", Binary: "redis-server", Durable: true, start: startRedis},
	{Name: "redis-everysec", System: "Redis", Config: "AOF appendfsync everysec", Binary: "redis-server", start: startRedis},
	{Name: "beanstalkd-f0", System: "beanstalkd", Config: "binlog, -f0 (fsync every write)", Binary: "beanstalkd", Durable: true, start: startBeanstalkd},
	{Name: "beanstalkd-f1000", System: "beanstalkd", Config: "binlog, -f1000 (fsync ≤ 1/s)", Binary: "beanstalkd", start: startBeanstalkd},
	{Name: "nats-always", System: "NATS JetStream", Config: "message schedules, sync_interval: always", Binary: "nats-server", Durable: true, start: startNATS},
	{Name: "nats-default", System: "NATS JetStream", Config: "message schedules, sync_interval default (2m)", Binary: "nats-server", start: startNATS},
}

// Brokers is how many nodes can fail over for each other: the Sundial
// brokers, 1 for a peer (a single server process).
func (s Spec) Brokers() int { return max(1, s.SundialBrokers) }

// Lookup finds a spec by name.
func Lookup(name string) (Spec, error) {
	for _, s := range Specs {
		if s.Name == name {
			return s, nil
		}
	}
	return Spec{}, fmt.Errorf("target: unknown system %q", name)
}

// ExtraBinDirs are searched before PATH for peer binaries: bin/tools of the
// repository (where install-peers.sh puts nats-server) and ~/go/bin.
func ExtraBinDirs() []string {
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
				dirs = append(dirs, filepath.Join(d, "bin", "tools"))
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	return dirs
}

// BinaryPath returns the spec's server binary, or an error wrapping
// proc.ErrNotFound naming it.
func (s Spec) BinaryPath() (string, error) {
	if s.Binary == "" {
		return "", nil
	}
	path, err := proc.Look(s.Binary, ExtraBinDirs()...)
	if err != nil {
		return "", fmt.Errorf("%w (run scripts/install-peers.sh)", err)
	}
	return path, nil
}

// Start starts the system.
func (s Spec) Start(ctx context.Context, opts Options) (Instance, error) {
	if _, err := s.BinaryPath(); err != nil {
		return nil, err
	}
	return s.start(ctx, s, opts)
}

// restartProcs stops procs gracefully and starts each again with start; it
// returns the moment the new processes were started.
func restartProcs(procs []*proc.Process, start func(i int) (*proc.Process, error)) (time.Time, error) {
	for _, p := range procs {
		if err := p.Stop(); err != nil {
			return time.Time{}, err
		}
	}
	started := time.Now()
	for i := range procs {
		p, err := start(i)
		if err != nil {
			return started, err
		}
		procs[i] = p
	}
	return started, nil
}

// pause sleeps d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func splitHostPort(addr string) (host, port string, err error) {
	return net.SplitHostPort(addr)
}
