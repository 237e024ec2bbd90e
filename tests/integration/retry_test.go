package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proxy"
)

// TestRetriedPublishIsAnsweredNotRepeated: a publish retried with its
// request id, through the same proxy or another one, answers the first
// attempt's ids and stores nothing more; the id reused for other messages
// is refused with InvalidArgument. What a busy machine may do to a
// cluster (a shard between leaders answering Unavailable, a delivery
// pushed again after a leader change, a push lost with its stream) is
// retried or allowed as the SDK and at-least-once delivery allow; only a
// second outcome for the request id fails the test. Nothing is decided by
// how fast the cluster is: what the topic holds is read from its shards,
// not inferred from deliveries that did not come within some seconds.
func TestRetriedPublishIsAnsweredNotRepeated(t *testing.T) {
	c := New(t, Config{})
	createTopic(t, c, &sundialv1.Topic{Name: "retried", Partitions: 8})
	// Until the proxy's table knows the topic it splits it as one
	// partition (issue 8 finding 6); this test is about retries.
	other := startProxy(t, c)
	waitProxyKnows(t, c.conn, "retried", 8)
	waitProxyKnows(t, other, "retried", 8)
	const n = 21 // not a multiple of the partitions: a counter-based split would differ on the retry
	batch := func(prefix string) []*sundialv1.Message {
		msgs := make([]*sundialv1.Message, n)
		for i := range msgs {
			msgs[i] = &sundialv1.Message{Topic: "retried", Payload: fmt.Appendf(nil, "%s-%d", prefix, i)}
		}
		return msgs
	}
	const rid = "retry-test-request"
	first := answered(t, c.Producer, rid, batch("m"))
	ids := map[string]int{} // message id → request position
	for i, r := range first {
		if r.GetError() != nil {
			t.Fatalf("Publish(%s) result %d error = %v", rid, i, r.GetError())
		}
		ids[r.GetMessageId()] = i
	}
	if len(ids) != n {
		t.Fatalf("Publish(%s) gave %d distinct ids for %d messages", rid, len(ids), n)
	}
	producers := []sundialv1.ProducerClient{c.Producer, sundialv1.NewProducerClient(other), c.Producer}
	for attempt, p := range producers {
		again := answered(t, p, rid, batch("m"))
		for i, r := range again {
			if r.GetError() != nil || r.GetMessageId() != first[i].GetMessageId() {
				t.Fatalf("retry %d of Publish(%s) result %d = %v, want id %s", attempt, rid, i, r, first[i].GetMessageId())
			}
		}
	}
	reused := answered(t, c.Producer, rid, batch("other"))
	for i, r := range reused {
		if code := codes.Code(r.GetError().GetCode()); code != codes.InvalidArgument {
			t.Fatalf("Publish(%s, other payloads) result %d = %v, want InvalidArgument", rid, i, r)
		}
	}

	// The topic holds the first attempt's messages and nothing else:
	// every answer is in, and a shard leader reads only once it applied
	// what its term committed, so a listing names whatever any retry
	// stored.
	listed := listMessages(t, c, "retried")
	if len(listed) != n {
		t.Errorf("topic holds %d messages after the retries, want the first attempt's %d", len(listed), n)
	}
	for _, m := range listed {
		if i, known := ids[m.GetMessageId()]; !known || string(m.GetPayload()) != fmt.Sprintf("m-%d", i) {
			t.Errorf("topic holds %s payload %q, not one of the first attempt's messages", m.GetMessageId(), m.GetPayload())
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// Every delivery is one of the first attempt's messages with its
	// payload; each of them arrives. Delivery is at least once: a copy
	// pushed by a leader that lost its term before the lease committed
	// comes again (and its first receipt's ack may fail), so a message
	// seen twice is no second message. A copy leased whose push was lost
	// (its shard stream reopened at a new leader) comes again only once
	// its lease ends: the subscription's lease is short, and the wait for
	// the next delivery is that lease plus 30 s for a busy cluster to lease
	// and push the copy again (a wait of 30 s against the default 30 s
	// lease raced it).
	const lease = 5 * time.Second
	const wait = lease + 30*time.Second
	sub := c.Subscribe("retried", "", n, lease)
	seen := map[string]bool{}
	for len(seen) < n {
		got, ok := sub.Next(wait)
		if !ok {
			t.Fatalf("received %d of %d messages, then none for %v with a %v lease (stream error %v)", len(seen), n, wait, lease, sub.Err())
		}
		i, known := ids[got.MessageId]
		if !known || string(got.Payload) != fmt.Sprintf("m-%d", i) {
			t.Fatalf("delivered %s payload %q, not one of the first attempt's messages", got.MessageId, got.Payload)
		}
		seen[got.MessageId] = true
		if err := ackOnce(t, c, got.Receipt); err != nil {
			t.Logf("Ack(%s attempt %d) = %v; it comes again", got.MessageId, got.Attempt, err)
		}
		sub.Credit(1)
	}
}

// createTopic creates topic, sending the request again while a busy
// cluster answers Unavailable or DeadlineExceeded, as the SDK does;
// AlreadyExists after such an answer is an earlier try's work.
func createTopic(t *testing.T, c *Cluster, topic *sundialv1.Topic) {
	t.Helper()
	var tried bool
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: topic})
		switch code := status.Code(err); {
		case code == codes.Unavailable || code == codes.DeadlineExceeded:
			tried = true
			return err
		case code == codes.AlreadyExists && tried:
			return nil
		case err != nil:
			t.Fatalf("CreateTopic(%s) error = %v", topic.GetName(), err)
		}
		return nil
	})
}

// listMessages answers every message of topic's default group on its
// shards (one page of up to 1000), asking again while a shard between
// leaders answers Unavailable or DeadlineExceeded.
func listMessages(t *testing.T, c *Cluster, topic string) []*sundialv1.MessageInfo {
	t.Helper()
	var resp *sundialv1.ListMessagesResponse
	Eventually(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		var err error
		resp, err = c.Admin.ListMessages(ctx, &sundialv1.ListMessagesRequest{Topic: topic, PageSize: 1000})
		if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
			return err
		}
		if err != nil {
			t.Fatalf("ListMessages(%s) error = %v", topic, err)
		}
		return nil
	})
	if resp.GetNextPageToken() != "" {
		t.Fatalf("ListMessages(%s) needs more than one page of 1000", topic)
	}
	return resp.GetMessages()
}

// ackOnce acks receipt and answers why it was not acked: the call's error
// when a busy cluster may cure it (Unavailable, DeadlineExceeded), or the
// receipt's result error. An unacked copy comes again after its lease.
func ackOnce(t *testing.T, c *Cluster, receipt string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := c.Consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{receipt}})
	if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
		return err
	}
	if err != nil {
		t.Fatalf("Ack() error = %v", err)
	}
	if e := resp.GetResults()[0].GetError(); e != nil {
		return status.ErrorProto(e)
	}
	return nil
}

// answered sends the request with request id rid until no result carries
// an error a retry may cure (Unavailable, DeadlineExceeded: a shard
// between leaders, a machine too busy to answer in time), as the SDK does,
// and returns the last results. A
// result answered OK once must name the same message on every later
// attempt.
func answered(t *testing.T, p sundialv1.ProducerClient, rid string, msgs []*sundialv1.Message) []*sundialv1.PublishResult {
	t.Helper()
	ids := make([]string, len(msgs))
	var res []*sundialv1.PublishResult
	Eventually(t, 60*time.Second, func() error {
		var err error
		if res, err = publishAs(t, p, rid, msgs); err != nil {
			return err
		}
		var transient error
		for i, r := range res {
			switch code := codes.Code(r.GetError().GetCode()); {
			case r.GetError() == nil && ids[i] == "":
				ids[i] = r.GetMessageId()
			case r.GetError() == nil && ids[i] != r.GetMessageId():
				t.Fatalf("Publish(%s) result %d = %s, an earlier attempt answered %s", rid, i, r.GetMessageId(), ids[i])
			case code == codes.Unavailable || code == codes.DeadlineExceeded:
				transient = fmt.Errorf("result %d: %v", i, r.GetError())
			}
		}
		return transient
	})
	return res
}

// publishAs sends one request with request id rid and returns its results,
// failed ones included. A failure of the whole call is returned when a
// retry may cure it (Unavailable, DeadlineExceeded) and fails the test
// otherwise.
func publishAs(t *testing.T, p sundialv1.ProducerClient, rid string, msgs []*sundialv1.Message) ([]*sundialv1.PublishResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := p.Publish(ctx, &sundialv1.PublishRequest{RequestId: rid, Messages: msgs})
	if code := status.Code(err); code == codes.Unavailable || code == codes.DeadlineExceeded {
		return nil, err
	}
	if err != nil {
		t.Fatalf("Publish(%s) error = %v", rid, err)
	}
	if len(resp.GetResults()) != len(msgs) {
		t.Fatalf("Publish(%s) gave %d results for %d messages", rid, len(resp.GetResults()), len(msgs))
	}
	return resp.GetResults(), nil
}

// startProxy starts a second proxy in front of c's brokers and returns a
// connection to it.
func startProxy(t *testing.T, c *Cluster) *grpc.ClientConn {
	t.Helper()
	pc := proxy.DefaultConfig()
	pc.AdminAddr = "" // no pprof listener: a test may run two proxies
	pc.GRPCAddr, pc.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	pc.Brokers = nil // not the defaults (127.0.0.1:7501-7503): another cluster may listen there
	for _, m := range c.members {
		pc.Brokers = append(pc.Brokers, m.GRPCAddr)
	}
	p, err := proxy.New(pc, logger(t).Named("proxy-2"), prometheus.NewRegistry())
	if err != nil {
		t.Fatalf("proxy.New() error = %v", err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatalf("proxy.Start() error = %v", err)
	}
	t.Cleanup(p.Stop)
	conn, err := grpc.NewClient(p.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial proxy-2: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// waitProxyKnows waits until the routing table of the proxy at conn gives
// topic its partitions.
func waitProxyKnows(t *testing.T, conn *grpc.ClientConn, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := sundialv1.NewClusterClient(conn).WatchRouting(ctx, &sundialv1.WatchRoutingRequest{})
	if err != nil {
		t.Fatalf("WatchRouting() error = %v", err)
	}
	for {
		table, err := stream.Recv()
		if err != nil {
			t.Fatalf("proxy's routing table never gave %s %d partitions: %v", topic, partitions, err)
		}
		for _, tr := range table.GetTopics() {
			if tr.GetName() == topic && tr.GetPartitions() == partitions {
				return
			}
		}
	}
}
