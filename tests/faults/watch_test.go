package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proc"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/tests/framework"
)

// watchMoveBound is how long after a broker froze the proxy may take to
// route by the leaders elected without it. The watch gives up on a silent
// broker after 2 s (proxy.DefaultConfig().WatchSilenceTimeout) and the
// shards elect within about a second; before the watch heard progress
// frames, only gRPC keepalive (10 s + 2 s) ended it.
const watchMoveBound = 8 * time.Second

// TestRoutingWatchLeavesPausedBroker freezes (SIGSTOP) the broker the
// proxy's routing watch follows, a broker that leads an event shard but
// not meta: within watchMoveBound the proxy watches another broker, its
// table names live leaders only, calls on the frozen broker's shard are
// answered through the proxy (one sent at the freeze too), a message
// published after the freeze reaches the subscription opened before it,
// and /readyz is 200.
func TestRoutingWatchLeavesPausedBroker(t *testing.T) {
	c, _, other := metaLeaderCluster(t)
	pauseWatchedBroker(t, c, other)
}

// TestRoutingWatchLeavesPausedMetaLeader is
// TestRoutingWatchLeavesPausedBroker with the watched broker leading meta
// too: the other brokers' tables name the new shard leaders without
// waiting for a meta election.
func TestRoutingWatchLeavesPausedMetaLeader(t *testing.T) {
	c, leader, _ := metaLeaderCluster(t)
	pauseWatchedBroker(t, c, leader)
}

// pauseWatchedBroker moves the proxy's watch to broker target, has target
// lead the shard of a topic with a subscription open through the proxy,
// freezes it and checks the proxy routes around it within watchMoveBound.
func pauseWatchedBroker(t *testing.T, c *framework.Cluster, target int) {
	t.Helper()
	proxy := c.Proxies[0]
	steerWatch(t, c, target)
	// The topic's one partition lives on shard, which target is made to
	// lead; a subscription reads it through the proxy.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := dial(t, proxy.GRPCAddr).admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "watch-heal"}, IfNotExists: true}); err != nil {
		t.Fatal(err)
	}
	probe, err := client.Dial(context.Background(), c.ProxyAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	first, err := probe.Publish(ctx, &sundialv1.Message{Topic: "watch-heal", Payload: []byte("before")})
	if err != nil {
		t.Fatal(err)
	}
	shard := shardOf(t, first[0].GetMessageId())
	if l, err := c.LeaderOf(shard); err != nil || l != target {
		framework.WaitFor(t, 60*time.Second, func() error {
			if l, err := c.LeaderOf(shard); err != nil || l == target {
				return err
			}
			if _, _, err := c.TransferLeader(context.Background(), shard, target); err != nil {
				return err
			}
			return fmt.Errorf("shard %d not led by broker %d yet", shard, target)
		})
	}
	framework.WaitFor(t, 30*time.Second, func() error {
		rt, err := proxyTable(proxy.GRPCAddr)
		if err != nil {
			return err
		}
		if l := leaderIn(rt, shard); l != uint64(target) {
			return fmt.Errorf("proxy's table: shard %d led by %d, want %d", shard, l, target)
		}
		return nil
	})
	if w := watchedBroker(t, c); w != target {
		t.Fatalf("proxy watches broker %d after the leadership move, want %d", w, target)
	}

	deliveries := subscribe(t, proxy.GRPCAddr, "watch-heal")
	select {
	case payload := <-deliveries:
		if payload != "before" {
			t.Fatalf("first delivery %q, want \"before\"", payload)
		}
	case <-ctx.Done():
		t.Fatal("the message published before the freeze was not delivered")
	}
	absent := receipt.NewMessageID(shard, math.MaxUint64, 0).String()

	if err := c.Pause(target); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	t.Cleanup(func() { _ = c.Resume(target) })
	// A call sent at the freeze, before the table moved, whose try waits
	// at the frozen leader: the proxy cuts the try once the table names
	// the new leader and answers from there, within the bound too (before,
	// it waited out forward_timeout, 10 s, and answered Unavailable). It
	// carries a request id, as the SDK's do: a change without one is not
	// cut (a second try would apply it again).
	producer := dial(t, proxy.GRPCAddr).producer
	type answer struct {
		outcome sundialv1.ChangeOutcome
		err     error
		after   time.Duration
	}
	early := make(chan answer, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := producer.Cancel(ctx, &sundialv1.CancelRequest{Message: client.ByID("watch-heal", absent), RequestId: "watch-heal-cancel-at-freeze"})
		early <- answer{resp.GetOutcome(), err, time.Since(paused)}
	}()
	var moved, routed, ready time.Duration
	err = proc.Poll(watchMoveBound, func() error {
		if moved == 0 {
			w, err := watchedBrokerErr(c)
			if err != nil {
				return err
			}
			if w == target {
				return fmt.Errorf("proxy still watches frozen broker %d", target)
			}
			moved = time.Since(paused)
		}
		if routed == 0 {
			rt, err := proxyTable(proxy.GRPCAddr)
			if err != nil {
				return err
			}
			for _, sh := range rt.GetShards() {
				if l := sh.GetLeaderNodeId(); l == 0 || l == uint64(target) {
					return fmt.Errorf("proxy's table (version %d): shard %d led by %d", rt.GetVersion(), sh.GetShardId(), l)
				}
			}
			// A cancel of an id no entry made: only a serving leader of the
			// shard answers it, not found.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			resp, err := probe.Cancel(ctx, client.ByID("watch-heal", absent))
			switch {
			case status.Code(err) == codes.NotFound:
			case err != nil:
				return fmt.Errorf("cancel on shard %d through the proxy: %w; want not found", shard, err)
			case resp.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND:
				return fmt.Errorf("cancel on shard %d through the proxy answered %v, want not found", shard, resp.GetOutcome())
			}
			routed = time.Since(paused)
		}
		if err := proc.HTTP200("http://" + proxy.HTTPAddr + "/readyz")(context.Background()); err != nil {
			return err
		}
		ready = time.Since(paused)
		return nil
	})
	if err != nil {
		t.Fatalf("%v after broker %d (leader of shard %d, followed by the proxy's routing watch) froze: %v",
			watchMoveBound, target, shard, err)
	}
	t.Logf("broker %d frozen: watch moved after %v, shard %d answered through the proxy after %v, /readyz 200 after %v",
		target, moved.Round(time.Millisecond), shard, routed.Round(time.Millisecond), ready.Round(time.Millisecond))
	// Published after the freeze, it lands at the new leader: the
	// subscription's stream on the frozen leader must move there (before,
	// it waited for keepalive to break it).
	pctx, pcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer pcancel()
	if _, err := probe.Publish(pctx, &sundialv1.Message{Topic: "watch-heal", Payload: []byte("after")}); err != nil {
		t.Fatalf("publish after the freeze: %v", err)
	}
	// "before" may come again first: its lease is pushed while its Raft
	// entry is in flight, and the freeze can land before that entry
	// commits, so the new leader never saw the lease (at-least-once).
	timeout := time.After(30 * time.Second)
	for got := false; !got; {
		select {
		case payload := <-deliveries:
			delivered := time.Since(paused)
			if payload == "before" {
				t.Logf("\"before\" delivered again %v after the freeze (its lease had not committed)", delivered.Round(time.Millisecond))
				continue
			}
			got = true
			t.Logf("the message published after the freeze was delivered %v after it", delivered.Round(time.Millisecond))
			if payload != "after" || delivered > watchMoveBound {
				t.Errorf("delivery %q %v after the freeze; want \"after\" within %v", payload, delivered.Round(time.Millisecond), watchMoveBound)
			}
		case <-timeout:
			t.Errorf("the message published after broker %d froze was not delivered within 30s", target)
			got = true
		}
	}
	a := <-early
	t.Logf("a cancel on shard %d sent through the proxy at the freeze: %v, %v after %v", shard, a.outcome, status.Code(a.err), a.after.Round(time.Millisecond))
	if a.err != nil || a.outcome != sundialv1.ChangeOutcome_CHANGE_OUTCOME_NOT_FOUND || a.after > watchMoveBound {
		t.Errorf("cancel on shard %d sent through the proxy as broker %d froze: %v, %v after %v; want not found within %v",
			shard, target, a.outcome, a.err, a.after.Round(time.Millisecond), watchMoveBound)
	}
}

// subscribe opens a subscription of topic's default group through the
// proxy at addr and answers the payloads it delivers.
func subscribe(t *testing.T, addr, topic string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := dial(t, addr).consumer.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&sundialv1.SubscribeRequest{Kind: &sundialv1.SubscribeRequest_Start{Start: &sundialv1.Start{Topic: topic, MaxInFlight: 10}}}); err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 10)
	go func() {
		for {
			resp, err := st.Recv()
			if err != nil {
				return
			}
			if d := resp.GetDelivery(); d != nil {
				out <- string(d.GetPayload())
			}
		}
	}()
	return out
}

// steerWatch makes the proxy's routing watch follow broker target: it cuts
// the proxy off the other brokers' gRPC until the watch is on target, then
// heals.
func steerWatch(t *testing.T, c *framework.Cluster, target int) {
	t.Helper()
	if watchedBroker(t, c) == target {
		return
	}
	for _, b := range c.Brokers {
		if b.ID != target {
			c.CutGRPC(b.ID)
		}
	}
	framework.WaitFor(t, 90*time.Second, func() error {
		w, err := watchedBrokerErr(c)
		if err != nil {
			return err
		}
		if w != target {
			return fmt.Errorf("proxy watches broker %d, want %d", w, target)
		}
		return nil
	})
	c.Heal()
	if err := c.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// watchedBroker is the broker whose routing watch stream the proxy has
// open (its sundial_proxy_routing_watch_broker series), waiting for one.
func watchedBroker(t *testing.T, c *framework.Cluster) int {
	t.Helper()
	var id int
	framework.WaitFor(t, 30*time.Second, func() error {
		var err error
		id, err = watchedBrokerErr(c)
		return err
	})
	return id
}

func watchedBrokerErr(c *framework.Cluster) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Proxies[0].HTTPAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return 0, err
	}
	for _, m := range fams["sundial_proxy_routing_watch_broker"].GetMetric() {
		if m.GetGauge().GetValue() != 1 {
			continue
		}
		for _, l := range m.GetLabel() {
			if l.GetName() != "broker_addr" {
				continue
			}
			for _, b := range c.Brokers {
				if b.GRPCAddr == l.GetValue() {
					return b.ID, nil
				}
			}
			return 0, fmt.Errorf("proxy watches %s, no broker of the cluster", l.GetValue())
		}
	}
	return 0, errors.New("proxy has no routing watch open")
}

// proxyTable is the routing table the proxy routes with: the first frame
// of its own WatchRouting.
func proxyTable(addr string) (*sundialv1.RoutingTable, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	stream, err := sundialv1.NewClusterClient(conn).WatchRouting(ctx, &sundialv1.WatchRoutingRequest{})
	if err != nil {
		return nil, err
	}
	return stream.Recv()
}

func leaderIn(rt *sundialv1.RoutingTable, shard uint64) uint64 {
	for _, sh := range rt.GetShards() {
		if sh.GetShardId() == shard {
			return sh.GetLeaderNodeId()
		}
	}
	return 0
}
