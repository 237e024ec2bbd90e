package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/broker"
	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/ring"
)

// Growing a 3-broker cluster from 4 to 8 shards under publish and consume
// traffic whose delays span the change: every message is delivered, none
// before its due time, none twice (acks are prompt); keyed messages
// published before the change, in partitions that hand over, are
// cancelled and rescheduled by key after it, and a REPLACE after it
// replaces (one delivery, the new payload). Then every hand-over closes:
// the old shards held nothing of their moved partitions any more.
func TestAddShardsUnderTraffic(t *testing.T) {
	c := New(t, Config{Shards: 4, Tune: func(cfg *broker.Config) { cfg.Testing.SweepInterval = time.Second }})
	cl := clusterClient(t, c.Proxy.GRPCAddr())
	const topic, parts = "grow", 16
	if _, err := c.Admin.CreateTopic(ctx10(t), &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic, Partitions: parts, DedupWindowMs: 1000}}); err != nil {
		t.Fatalf("CreateTopic() error = %v", err)
	}
	if _, err := cl.AddShards(ctx10(t), &sundialv1.AddShardsRequest{Count: 0}); status.Code(err) != codes.InvalidArgument ||
		len(apierr.Violations(err)) != 1 || apierr.Violations(err)[0].Field != "count" {
		t.Fatalf("AddShards(0) error = %v, want InvalidArgument on count", err)
	}

	// One keyed message per partition, due in an hour.
	keyOf := map[uint32]string{}
	for i := 0; len(keyOf) < parts; i++ {
		k := fmt.Sprintf("key-%d", i)
		if p := ring.KeyPartition(k, parts); keyOf[p] == "" {
			keyOf[p] = k
			publish(t, c, &sundialv1.Message{Topic: topic, Key: k, Payload: []byte("old " + k), DelayMs: time.Hour.Milliseconds()})
		}
	}

	var mu sync.Mutex
	due := map[string]int64{} // unkeyed message id → due time
	var pubErr error          // a publish that failed (none should)
	sub := c.Subscribe(topic, "", 100, 0)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			msgs := make([]*sundialv1.Message, 10)
			for j := range msgs {
				msgs[j] = &sundialv1.Message{Topic: topic, Payload: []byte(fmt.Sprint(i, "/", j)), DelayMs: int64(j) * 400}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			resp, err := c.Producer.Publish(ctx, &sundialv1.PublishRequest{Messages: msgs})
			cancel()
			mu.Lock()
			if err != nil {
				pubErr = err
			}
			for _, r := range resp.GetResults() {
				if r.GetError() != nil {
					pubErr = fmt.Errorf("result: %v", r.GetError())
				} else {
					due[r.MessageId] = r.DueAtUnixMs
				}
			}
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	})
	time.Sleep(time.Second)

	added, err := func() (*sundialv1.AddShardsResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		return cl.AddShards(ctx, &sundialv1.AddShardsRequest{Count: 4})
	}()
	if err != nil {
		t.Fatalf("AddShards(4) error = %v", err)
	}
	if len(added.GetShards()) != 4 || len(added.GetHandovers()) == 0 {
		t.Fatalf("AddShards(4) = %v, want 4 new shards and open hand-overs", added)
	}
	for _, s := range added.GetShards() {
		if s.GetStarting() || len(s.GetReplicas()) != 3 {
			t.Fatalf("new shard %v: want serving with 3 replicas", s)
		}
	}
	if _, err := cl.AddShards(ctx10(t), &sundialv1.AddShardsRequest{Count: 1}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("AddShards while hand-overs are open: error = %v, want FailedPrecondition", err)
	}
	var moved []uint32
	for _, h := range added.GetHandovers() {
		if h.GetTopic() == topic {
			moved = append(moved, h.GetPartition())
		}
	}
	if len(moved) < 3 {
		t.Fatalf("hand-overs of %s = %v, want at least 3 moved partitions", topic, moved)
	}
	time.Sleep(2 * time.Second) // traffic after the change
	close(stop)
	wg.Wait()
	if pubErr != nil {
		t.Fatalf("publish under traffic failed: %v", pubErr)
	}

	// Keys of moved partitions: cancel one, reschedule one, replace one;
	// cancel the rest of the keys.
	sel := func(k string) *sundialv1.MessageSelector {
		return &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_Key{Key: k}}
	}
	cancelled, rescheduled, replaced := keyOf[moved[0]], keyOf[moved[1]], keyOf[moved[2]]
	if r, err := c.Producer.Cancel(ctx10(t), &sundialv1.CancelRequest{Message: sel(cancelled)}); err != nil || r.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Cancel(%s) after the change = %v, %v, want DONE", cancelled, r, err)
	}
	rs, err := c.Producer.Reschedule(ctx10(t), &sundialv1.RescheduleRequest{Message: sel(rescheduled), DelayMs: 500})
	if err != nil || rs.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Reschedule(%s) after the change = %v, %v, want DONE", rescheduled, rs, err)
	}
	rp := publish(t, c, &sundialv1.Message{Topic: topic, Key: replaced, Payload: []byte("new"), DelayMs: 500, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_REPLACE})[0]
	if rp.GetKeyOutcome() != sundialv1.KeyOutcome_KEY_OUTCOME_REPLACED {
		t.Fatalf("REPLACE of %s after the change = %v, want REPLACED (the pending key was seen)", replaced, rp)
	}
	for _, k := range keyOf {
		if k == cancelled || k == rescheduled || k == replaced {
			continue
		}
		if r, err := c.Producer.Cancel(ctx10(t), &sundialv1.CancelRequest{Message: sel(k)}); err != nil || r.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
			t.Fatalf("Cancel(%s) = %v, %v, want DONE", k, r, err)
		}
	}
	keyedDue := map[string]int64{rs.GetMessageId(): rs.GetDueAtUnixMs(), rp.GetMessageId(): rp.GetDueAtUnixMs()}

	mu.Lock()
	want := len(due) + len(keyedDue)
	mu.Unlock()
	got := map[string]Received{}
	for len(got) < want {
		d, ok := sub.Next(30 * time.Second)
		if !ok {
			t.Fatalf("received %d of %d messages (stream error %v)", len(got), want, sub.Err())
		}
		if prev, dup := got[d.MessageId]; dup {
			t.Fatalf("message %s delivered twice (attempts %d and %d)", d.MessageId, prev.Attempt, d.Attempt)
		}
		got[d.MessageId] = d
		ack(t, c, d.Receipt)
		sub.Credit(1)
	}
	for id, d := range got {
		at, ok := due[id]
		if !ok {
			at, ok = keyedDue[id]
		}
		if !ok {
			t.Fatalf("delivered %s (key %q, payload %q), which was not published or was cancelled", id, d.Key, d.Payload)
		}
		if d.At.UnixMilli() < at {
			t.Errorf("message %s delivered at %d, before its due time %d", id, d.At.UnixMilli(), at)
		}
		if d.Key == replaced && string(d.Payload) != "new" {
			t.Errorf("replaced key %s delivered payload %q, want new", replaced, d.Payload)
		}
	}

	// With nothing left on the old shards, every hand-over closes.
	Eventually(t, 60*time.Second, func() error {
		info, err := c.Admin.GetClusterInfo(ctx10(t), &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			return err
		}
		if n := len(info.GetHandovers()); n > 0 {
			return fmt.Errorf("%d hand-overs open", n)
		}
		if len(info.GetShards()) != 8 {
			return fmt.Errorf("%d shards, want 8", len(info.GetShards()))
		}
		return nil
	})
	// After the close, keys live on the ring's owner: a key published now
	// is found and cancelled by key.
	publish(t, c, &sundialv1.Message{Topic: topic, Key: cancelled, Payload: []byte("again"), DelayMs: time.Hour.Milliseconds()})
	if r, err := c.Producer.Cancel(ctx10(t), &sundialv1.CancelRequest{Message: sel(cancelled)}); err != nil || r.GetOutcome() != sundialv1.ChangeOutcome_CHANGE_OUTCOME_DONE {
		t.Fatalf("Cancel(%s) after the hand-overs closed = %v, %v, want DONE", cancelled, r, err)
	}
	if extra, ok := sub.Next(time.Second); ok {
		t.Fatalf("extra delivery %s (payload %q) after all were acked", extra.MessageId, extra.Payload)
	}
}
