package proxy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/receipt"
	"github.com/sundialmq/sundial/proxy/internal/forward"

	brokerv1 "github.com/sundialmq/sundial/proto/gen/sundial/broker/v1"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// fakeQueue is the leader's record of queue-semantics calls.
type fakeQueue struct {
	mu      sync.Mutex
	changes []*brokerv1.ShardChangeRequest
	groups  []*brokerv1.ShardGroupRequest
	purges  []*brokerv1.ShardTopicRequest
}

// listed is shard s's listing of topic "wide": 5 messages with cursors
// interleaving with the other shards'.
func listed(shard uint64) []string {
	var out []string
	for i := range 5 {
		out = append(out, fmt.Sprintf("c%02d-%d", i*4+int(shard), shard))
	}
	return out
}

func (b *fakeBroker) lead(shard uint64) error {
	if !b.leader {
		return apierr.NotLeader(shard, 1, b.leaderAddr)
	}
	return nil
}

func (b *fakeBroker) Cancel(_ context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.CancelResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	b.queue.mu.Lock()
	b.queue.changes = append(b.queue.changes, req)
	b.queue.mu.Unlock()
	return &sundialv1.CancelResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE, MessageId: fmt.Sprintf("%d/%d", req.GetShardId(), req.GetPartition())}, nil
}

func (b *fakeBroker) Reschedule(_ context.Context, req *brokerv1.ShardChangeRequest) (*sundialv1.RescheduleResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	b.queue.mu.Lock()
	b.queue.changes = append(b.queue.changes, req)
	b.queue.mu.Unlock()
	return &sundialv1.RescheduleResponse{Outcome: sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT, DueAtUnixMs: req.GetDeliverAtUnixMs()}, nil
}

func (b *fakeBroker) Group(_ context.Context, req *brokerv1.ShardGroupRequest) (*brokerv1.ShardGroupResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	b.queue.mu.Lock()
	b.queue.groups = append(b.queue.groups, req)
	b.queue.mu.Unlock()
	return &brokerv1.ShardGroupResponse{}, nil
}

func (b *fakeBroker) Purge(_ context.Context, req *brokerv1.ShardTopicRequest) (*sundialv1.PurgeTopicResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	b.queue.mu.Lock()
	b.queue.purges = append(b.queue.purges, req)
	b.queue.mu.Unlock()
	return &sundialv1.PurgeTopicResponse{Purged: int64(len(req.GetPartitions()))}, nil
}

func (b *fakeBroker) Stats(_ context.Context, req *brokerv1.ShardTopicRequest) (*brokerv1.ShardStatsResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	s := req.GetShardId()
	return &brokerv1.ShardStatsResponse{Stats: []*sundialv1.GroupStats{
		{Group: "default", Scheduled: int64(len(req.GetPartitions())), Ready: 1, LatenessP99Ms: float64(s)},
	}}, nil
}

func (b *fakeBroker) ListMessages(_ context.Context, req *brokerv1.ShardListMessagesRequest) (*brokerv1.ShardListMessagesResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	out := &brokerv1.ShardListMessagesResponse{}
	for _, c := range listed(req.GetShardId()) {
		if c <= string(req.GetAfter()) {
			continue
		}
		if len(out.Messages) == int(req.GetRequest().GetPageSize()) {
			break
		}
		out.Messages = append(out.Messages, &sundialv1.MessageInfo{MessageId: c})
		out.Cursors = append(out.Cursors, []byte(c))
	}
	return out, nil
}

func (b *fakeBroker) DueHistogram(_ context.Context, req *brokerv1.ShardDueHistogramRequest) (*sundialv1.DueHistogramResponse, error) {
	if err := b.lead(req.GetShardId()); err != nil {
		return nil, err
	}
	from := req.GetRequest().GetFromUnixMs()
	return &sundialv1.DueHistogramResponse{Counts: []*sundialv1.HistogramCount{{StartUnixMs: from, Count: 1}, {StartUnixMs: req.GetRequest().GetToUnixMs(), Count: int64(req.GetShardId())}}}, nil
}

// fakeAdmin answers the meta side of the Admin service.
type fakeAdmin struct {
	sundialv1.UnimplementedAdminServer
	deletes *atomic.Int32 // DeleteTopic calls
}

func (fakeAdmin) ListTopics(context.Context, *sundialv1.ListTopicsRequest) (*sundialv1.ListTopicsResponse, error) {
	return &sundialv1.ListTopicsResponse{Topics: []*sundialv1.Topic{{Name: "orders", Partitions: 8}, {Name: "wide", Partitions: 8}}}, nil
}

func (fakeAdmin) GetTopic(_ context.Context, req *sundialv1.GetTopicRequest) (*sundialv1.Topic, error) {
	if req.GetName() == "missing" {
		return nil, status.Error(codes.NotFound, "no topic missing")
	}
	return &sundialv1.Topic{Name: req.GetName(), Partitions: 8, Groups: []string{"default", "billing"}}, nil
}

func (fakeAdmin) CreateGroup(_ context.Context, req *sundialv1.CreateGroupRequest) (*sundialv1.Group, error) {
	return &sundialv1.Group{Topic: req.GetTopic(), Name: req.GetGroup()}, nil
}

func (fakeAdmin) DeleteGroup(context.Context, *sundialv1.DeleteGroupRequest) (*sundialv1.DeleteGroupResponse, error) {
	return &sundialv1.DeleteGroupResponse{}, nil
}

func (fakeAdmin) ListGroups(_ context.Context, req *sundialv1.ListGroupsRequest) (*sundialv1.ListGroupsResponse, error) {
	return &sundialv1.ListGroupsResponse{Groups: []*sundialv1.Group{{Topic: req.GetTopic(), Name: "default"}, {Topic: req.GetTopic(), Name: "billing"}}}, nil
}

// DeleteTopic of topic "slow" answers DeadlineExceeded twice, and of
// topic "never" always, as a broker whose wait for the operation ran out.
func (a fakeAdmin) DeleteTopic(_ context.Context, req *sundialv1.DeleteTopicRequest) (*sundialv1.DeleteTopicResponse, error) {
	n := a.deletes.Add(1)
	if (req.GetName() == "slow" && n <= 2) || req.GetName() == "never" {
		return nil, status.Error(codes.DeadlineExceeded, "the wait for operation 7 ran out")
	}
	return &sundialv1.DeleteTopicResponse{}, nil
}

// A DeleteTopic whose broker answers DeadlineExceeded while the request's
// own deadline has time left is sent again until the operation is done,
// and no more; once the request's deadline passes the answer is
// DeadlineExceeded saying the operation still runs. No assertion depends
// on how fast anything runs: the proxy's forward timeout is as long as
// the whole wait, so a starved machine cannot have the proxy cut the try
// that succeeds and send it a fourth time, and the deadline case is asked
// of the proxy's handler in-process (its answer is the proxy's own,
// whatever the time it took). When the wait ends is checked on a fake
// clock by TestAdminOperationAnswersBeforeTheCallersDeadline.
func TestAdminOperationWaitsPastBrokerTimeouts(t *testing.T) {
	srv, leader, conn := startClusterWith(t, nil, func(cfg *Config) { cfg.ForwardTimeout = adminWaitTimeout })
	adm := sundialv1.NewAdminClient(conn)
	if _, err := adm.DeleteTopic(t.Context(), &sundialv1.DeleteTopicRequest{Name: "slow"}); err != nil {
		t.Fatalf("DeleteTopic(slow) = %v, want done after two broker timeouts", err)
	}
	if n := leader.admin.(*fakeAdmin).deletes.Load(); n != 3 {
		t.Errorf("DeleteTopic(slow) reached the brokers %d times, want 3", n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	_, err := admin{s: srv}.DeleteTopic(ctx, &sundialv1.DeleteTopicRequest{Name: "never"})
	if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || !strings.Contains(st.Message(), "the operation still runs and will complete") {
		t.Fatalf("DeleteTopic(never, 1s) = %v, want DeadlineExceeded saying the operation still runs", err)
	}
}

// awaitOperation sends again what a broker answers DeadlineExceeded or
// Unavailable and returns any other answer at once; its wait ends
// adminAnswerMargin before the caller's deadline (a tenth of the time left
// when that is less) or adminWaitTimeout after it began, every try has
// that end as its deadline, and the answer then is DeadlineExceeded saying
// the operation still runs. In a synctest bubble the clock moves only when
// every goroutine waits, so the times are exact however slow the machine.
func TestAdminOperationAnswersBeforeTheCallersDeadline(t *testing.T) {
	ranOut := status.Error(codes.DeadlineExceeded, "the wait for operation 8 ran out")
	for _, tc := range []struct {
		name    string
		timeout time.Duration // the caller's; 0: none
		answers []error       // the tries' answers; the last one repeats
		tries   int           // 0: as many as the wait allows
		wantErr codes.Code
		end     time.Duration // the wait's end: every try's deadline
		at      time.Duration // when the answer comes
	}{
		{"done on the second try", 2 * time.Second, []error{ranOut, nil}, 2, codes.OK, 1800 * time.Millisecond, forward.MinBackoff},
		{"broker lost, then done", 2 * time.Second, []error{status.Error(codes.Unavailable, "no broker reachable"), nil}, 2, codes.OK, 1800 * time.Millisecond, forward.MinBackoff},
		{"refused at once", 2 * time.Second, []error{status.Error(codes.NotFound, "no topic t")}, 1, codes.NotFound, 1800 * time.Millisecond, 0},
		{"runs past 2s: the margin early", 2 * time.Second, []error{ranOut}, 0, codes.DeadlineExceeded, 1800 * time.Millisecond, 1800 * time.Millisecond},
		{"runs past 1s: a tenth early", time.Second, []error{ranOut}, 0, codes.DeadlineExceeded, 900 * time.Millisecond, 900 * time.Millisecond},
		{"runs past no deadline", 0, []error{ranOut}, 0, codes.DeadlineExceeded, adminWaitTimeout, adminWaitTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start, ctx := time.Now(), t.Context()
				if tc.timeout > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.timeout)
					defer cancel()
				}
				var tries []time.Time
				_, err := awaitOperation(ctx, func(ctx context.Context) (*sundialv1.DeleteTopicResponse, error) {
					d, ok := ctx.Deadline()
					if !ok {
						t.Fatalf("try %d has no deadline", len(tries))
					}
					tries = append(tries, d)
					return &sundialv1.DeleteTopicResponse{}, tc.answers[min(len(tries), len(tc.answers))-1]
				})
				if got := status.Code(err); got != tc.wantErr {
					t.Fatalf("awaitOperation() = %v, want %v", err, tc.wantErr)
				}
				if tc.wantErr == codes.DeadlineExceeded && !strings.Contains(status.Convert(err).Message(), "the operation still runs and will complete") {
					t.Errorf("awaitOperation() = %v, want it to say the operation still runs", err)
				}
				if got := time.Since(start); got != tc.at {
					t.Errorf("awaitOperation() answered after %v, want %v", got, tc.at)
				}
				if tc.tries > 0 && len(tries) != tc.tries || tc.tries == 0 && len(tries) < 2 {
					t.Errorf("awaitOperation() made %d tries, want %d (0: several)", len(tries), tc.tries)
				}
				for i, d := range tries {
					if got := d.Sub(start); got != tc.end {
						t.Errorf("try %d has deadline %v, want the wait's end %v", i, got, tc.end)
					}
				}
			})
		})
	}
}

func TestCancelAndRescheduleRouting(t *testing.T) {
	srv, leader, conn := startCluster(t)
	table := srv.watcher.Table()
	prod := sundialv1.NewProducerClient(conn)
	part := uint32(xxhash.Sum64String("order-9") % 8)
	resp, err := prod.Cancel(t.Context(), &sundialv1.CancelRequest{Message: &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_Key{Key: "order-9"}}})
	if err != nil {
		t.Fatalf("Cancel(by key) = %v", err)
	}
	if want := fmt.Sprintf("%d/%d", table.Locate("wide", part), part); resp.GetMessageId() != want || resp.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Errorf("Cancel(by key) = %v, want DONE at shard/partition %s", resp, want)
	}
	id := receipt.NewMessageID(3, 10, 0).String()
	at := time.Now().Add(time.Hour).UnixMilli()
	rr, err := prod.Reschedule(t.Context(), &sundialv1.RescheduleRequest{Message: &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_MessageId{MessageId: id}}, DeliverAtUnixMs: at})
	if err != nil {
		t.Fatalf("Reschedule(by id) = %v", err)
	}
	if rr.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_IN_FLIGHT || rr.GetDueAtUnixMs() != at {
		t.Errorf("Reschedule(by id) = %v, want the shard's answer", rr)
	}
	leader.queue.mu.Lock()
	last := leader.queue.changes[len(leader.queue.changes)-1]
	leader.queue.mu.Unlock()
	if last.GetShardId() != 3 || last.GetPartition() != 0 || last.GetDeliverAtUnixMs() != at {
		t.Errorf("shard saw %v, want shard 3 partition 0 deliver_at %d", last, at)
	}
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"bad id", func() error {
			_, err := prod.Cancel(t.Context(), &sundialv1.CancelRequest{Message: &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_MessageId{MessageId: "nope"}}})
			return err
		}},
		{"no selector", func() error { _, err := prod.Cancel(t.Context(), &sundialv1.CancelRequest{}); return err }},
		{"into the past", func() error {
			_, err := prod.Reschedule(t.Context(), &sundialv1.RescheduleRequest{Message: &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_Key{Key: "k"}}, DeliverAtUnixMs: 1000})
			return err
		}},
		{"publish to dlq", func() error {
			_, err := prod.Publish(t.Context(), &sundialv1.PublishRequest{Messages: []*sundialv1.Message{{Topic: "wide.dlq"}}})
			return err
		}},
	} {
		if err := tc.call(); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: error = %v, want InvalidArgument", tc.name, err)
		}
	}
}

func TestGroupsAndStatsFanOut(t *testing.T) {
	srv, leader, conn := startCluster(t)
	adm := sundialv1.NewAdminClient(conn)
	if _, err := adm.CreateGroup(t.Context(), &sundialv1.CreateGroupRequest{Topic: "wide", Group: "billing"}); err != nil {
		t.Fatalf("CreateGroup() = %v", err)
	}
	leader.queue.mu.Lock()
	fannedOut := len(leader.queue.groups)
	leader.queue.mu.Unlock()
	if fannedOut != 0 {
		t.Errorf("CreateGroup sent %d Shard.Group calls from the proxy, want none: the broker runs it as a meta operation", fannedOut)
	}
	registered := len(srv.watcher.Table().TopicShards("wide"))
	topic, err := adm.GetTopic(t.Context(), &sundialv1.GetTopicRequest{Name: "wide"})
	if err != nil {
		t.Fatalf("GetTopic() = %v", err)
	}
	if len(topic.GetStats()) != 2 {
		t.Fatalf("GetTopic().stats = %v, want default and billing", topic.GetStats())
	}
	def := topic.GetStats()[0]
	if def.GetGroup() != "default" || def.GetScheduled() != 8 || def.GetReady() != int64(registered) || def.GetLatenessP99Ms() < 2 {
		t.Errorf("default stats = %v, want scheduled 8 (one per partition), ready %d (one per shard), p99 the max shard id", def, registered)
	}
	groups, err := adm.ListGroups(t.Context(), &sundialv1.ListGroupsRequest{Topic: "wide"})
	if err != nil || len(groups.GetGroups()) != 2 || groups.GetGroups()[0].GetStats().GetScheduled() != 8 {
		t.Errorf("ListGroups() = %v, %v, want two groups, default with stats", groups, err)
	}
	purged, err := adm.PurgeTopic(t.Context(), &sundialv1.PurgeTopicRequest{Name: "wide", Group: "billing"})
	if err != nil || purged.GetPurged() != 8 {
		t.Errorf("PurgeTopic() = %v, %v, want 8 purged (one per partition)", purged, err)
	}
	if _, err := adm.GetTopic(t.Context(), &sundialv1.GetTopicRequest{Name: "missing"}); status.Code(err) != codes.NotFound {
		t.Errorf("GetTopic(missing) = %v, want NotFound", err)
	}
}

func TestListMessagesPages(t *testing.T) {
	srv, _, conn := startCluster(t)
	adm := sundialv1.NewAdminClient(conn)
	shards := srv.watcher.Table().TopicShards("wide")
	var want []string
	for s := range shards {
		want = append(want, listed(s)...)
	}
	sort.Strings(want)
	var got []string
	req := &sundialv1.ListMessagesRequest{Topic: "wide", PageSize: 3}
	for page := 0; ; page++ {
		if page > 20 {
			t.Fatal("listing did not end after 20 pages")
		}
		resp, err := adm.ListMessages(t.Context(), req)
		if err != nil {
			t.Fatalf("ListMessages(page %d) = %v", page, err)
		}
		if len(resp.GetMessages()) > 3 {
			t.Fatalf("page %d has %d messages, want at most 3", page, len(resp.GetMessages()))
		}
		for _, m := range resp.GetMessages() {
			got = append(got, m.GetMessageId())
		}
		if resp.GetNextPageToken() == "" {
			break
		}
		req.PageToken = resp.GetNextPageToken()
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("listed %v, want %v", got, want)
	}
	req.KeyPrefix = "other"
	if _, err := adm.ListMessages(t.Context(), req); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ListMessages(token of another query) = %v, want InvalidArgument", err)
	}
}

func TestDueHistogramFanOut(t *testing.T) {
	srv, _, conn := startCluster(t)
	from := time.Now().Add(time.Hour).UnixMilli()
	resp, err := sundialv1.NewAdminClient(conn).DueHistogram(t.Context(), &sundialv1.DueHistogramRequest{Topic: "wide", FromUnixMs: from})
	if err != nil {
		t.Fatalf("DueHistogram() = %v", err)
	}
	shards := srv.watcher.Table().TopicShards("wide")
	var sum int64
	for s := range shards {
		sum += int64(s)
	}
	c := resp.GetCounts()
	if len(c) != 2 || c[0].GetStartUnixMs() != from || c[0].GetCount() != int64(len(shards)) || c[1].GetStartUnixMs() != from+60*60_000 || c[1].GetCount() != sum {
		t.Errorf("DueHistogram() = %v, want [%d: %d, %d: %d]", c, from, len(shards), from+60*60_000, sum)
	}
}
