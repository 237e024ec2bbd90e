package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/cluster"
	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// sundial drives a local cluster through the proxy with the Go SDK: one
// Publish call per batch (deliver_at_unix_ms), one Subscribe stream with
// Workers×Prefetch credit, each delivery acked over the stream.
type sundial struct {
	cl    *cluster.Cluster
	c     *client.Client
	topic string
	// noRequestIDs sends each batch without a request id (no dedup record,
	// no retry).
	noRequestIDs bool
}

func startSundial(ctx context.Context, spec Spec, opts Options) (Instance, error) {
	brokers := opts.Brokers
	if brokers <= 0 {
		brokers = spec.SundialBrokers
	}
	cl, err := cluster.Start(ctx, cluster.Config{
		Brokers: brokers, Shards: opts.Shards, BinDir: opts.SundialBinDir,
		DataDir: filepath.Join(opts.Dir, "sundial"), KeepData: true, TLS: spec.TLS, Auth: spec.TLS,
	})
	if err != nil {
		return nil, err
	}
	partitions := opts.Partitions
	if partitions <= 0 {
		partitions = cl.Shards()
	}
	s, err := dialSundial(ctx, cl, cl.ProxyAddr(), opts.queue(), partitions)
	if err != nil {
		return nil, errors.Join(err, cl.Stop())
	}
	s.noRequestIDs = opts.NoRequestIDs
	return s, nil
}

// NewSundial drives a running cluster (which Close then stops): it creates
// topic with one partition per shard, so load spreads over every shard.
func NewSundial(ctx context.Context, cl *cluster.Cluster, topic string) (Instance, error) {
	return dialSundial(ctx, cl, cl.ProxyAddr(), topic, cl.Shards())
}

// DialSundial drives a cluster loadtest did not start, through proxy:
// Pids, DataDirs, Restart and KillLeader are unavailable.
func DialSundial(ctx context.Context, proxy, topic string, partitions int) (scenario.Target, func() error, error) {
	s, err := dialSundial(ctx, nil, proxy, topic, partitions)
	if err != nil {
		return nil, nil, err
	}
	return s, s.c.Close, nil
}

func dialSundial(ctx context.Context, cl *cluster.Cluster, proxy, topic string, partitions int) (*sundial, error) {
	opts := []client.Option{client.WithAttemptTimeout(10 * time.Second)}
	if cl != nil && cl.ClientTLS() != nil {
		opts = append(opts, client.WithTLSFiles(*cl.ClientTLS()))
	}
	if cl != nil && cl.Token() != "" {
		opts = append(opts, client.WithToken(cl.Token()))
	}
	c, err := client.Dial(ctx, []string{proxy}, opts...)
	if err != nil {
		return nil, err
	}
	s := &sundial{cl: cl, c: c, topic: topic}
	// The first shard leaders may still be electing: retry for a while.
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var lastErr error
	for cctx.Err() == nil {
		_, lastErr = c.Admin().CreateTopic(cctx, &sundialv1.CreateTopicRequest{
			Topic:       &sundialv1.Topic{Name: topic, Partitions: int32(partitions)},
			IfNotExists: true,
		})
		if lastErr == nil {
			_, lastErr = c.Publish(cctx, &sundialv1.Message{Topic: topic, Payload: []byte("warm-up"), DelayMs: 3600_000})
		}
		if lastErr == nil {
			return s, nil
		}
		pause(cctx, 200*time.Millisecond)
	}
	c.Close()
	return nil, fmt.Errorf("target: sundial: topic %s not ready: %w", topic, lastErr)
}

func (s *sundial) Publish(ctx context.Context, msgs []scenario.Message) error {
	pm := make([]*sundialv1.Message, len(msgs))
	for i, m := range msgs {
		pm[i] = &sundialv1.Message{Topic: s.topic, Payload: m.Payload, DeliverAtUnixMs: m.Due.UnixMilli()}
	}
	var res []*sundialv1.PublishResult
	var err error
	if s.noRequestIDs {
		var resp *sundialv1.PublishResponse
		resp, err = s.c.Producer().Publish(ctx, &sundialv1.PublishRequest{Messages: pm})
		res = resp.GetResults()
	} else {
		res, err = s.c.Publish(ctx, pm...)
	}
	if err != nil {
		return err
	}
	for _, r := range res {
		if err := client.StatusError(r.GetError()); err != nil {
			return err
		}
	}
	return nil
}

func (s *sundial) Consume(ctx context.Context, opts scenario.ConsumeOptions, handle func(scenario.Delivery)) error {
	var (
		mu       sync.Mutex // guards firstErr
		firstErr error
	)
	err := s.c.Subscribe(ctx, client.SubscribeOptions{Topic: s.topic, MaxInFlight: max(1, opts.Workers*opts.Prefetch)},
		func(hctx context.Context, d *client.Delivery) {
			recv := time.Now()
			// A delivery counts even when its ack fails (it will be
			// redelivered): losing a message means never delivering it.
			if err := d.Ack(hctx); err != nil && hctx.Err() == nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
			handle(scenario.Delivery{Payload: d.GetPayload(), Received: recv})
		})
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = nil
	}
	mu.Lock()
	defer mu.Unlock()
	return errors.Join(err, firstErr)
}

func (s *sundial) Pids() []int        { return s.cl.BrokerPids() }
func (s *sundial) DataDirs() []string { return s.cl.DataDirs() }

// CPUGroups are every server process, the proxy included, by role: the
// CPU column charges Sundial for all of them, as it charges a peer for its
// server, and splits the sum into brokers and proxy.
func (s *sundial) CPUGroups() []ProcessGroup {
	return []ProcessGroup{{Role: RoleBrokers, Pids: s.cl.BrokerPids()}, {Role: RoleProxy, Pids: []int{s.cl.ProxyPid()}}}
}

// Endpoints are every server process's HTTP address, brokers first (named
// broker-<node id>), then the proxy.
func (s *sundial) Endpoints() []Endpoint {
	var eps []Endpoint
	admins := s.cl.BrokerAdminAddrs()
	for i, addr := range s.cl.BrokerHTTPAddrs() {
		eps = append(eps, Endpoint{Role: RoleBrokers, Name: fmt.Sprintf("broker-%d", s.cl.Brokers()[i]), Addr: addr, PprofAddr: admins[i]})
	}
	return append(eps, Endpoint{Role: RoleProxy, Name: "proxy", Addr: s.cl.ProxyHTTPAddr(), PprofAddr: s.cl.ProxyAdminAddr()})
}

// Restart stops every broker (the proxy keeps running), starts them again
// and waits for every /healthz.
func (s *sundial) Restart(ctx context.Context) (time.Time, error) {
	ids := s.cl.Brokers()
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.cl.StopBroker(id) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	started := time.Now()
	for _, id := range ids {
		if err := s.cl.Restart(id); err != nil {
			return started, err
		}
	}
	return started, s.cl.WaitHealthy(ctx)
}

// KillLeader SIGKILLs the broker leading the most shards.
func (s *sundial) KillLeader(ctx context.Context) (string, error) {
	info, err := s.c.Admin().GetClusterInfo(ctx, &sundialv1.GetClusterInfoRequest{})
	if err != nil {
		return "", err
	}
	led := map[uint64]int{}
	for _, sh := range info.GetShards() {
		if id := sh.GetLeaderNodeId(); id != 0 {
			led[id]++
		}
	}
	if len(led) == 0 {
		return "", errors.New("target: sundial: no shard has a known leader")
	}
	ids := make([]uint64, 0, len(led))
	for id := range led {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return led[ids[i]] > led[ids[j]] || led[ids[i]] == led[ids[j]] && ids[i] < ids[j] })
	victim := ids[0]
	if err := s.cl.Kill(cluster.NodeID(victim)); err != nil {
		return "", err
	}
	return fmt.Sprintf("broker-%d (leader of %d/%d shards)", victim, led[victim], len(info.GetShards())), nil
}

func (s *sundial) Close() error {
	return errors.Join(s.c.Close(), s.cl.Stop())
}
