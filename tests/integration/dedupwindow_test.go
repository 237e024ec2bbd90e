package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/sundialmq/sundial/broker"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/checker"
	"github.com/sundialmq/sundial/tests/history"
)

// TestRequestIDAtTheDedupWindowsEdge re-sends one publish request every
// 100 ms on brokers with a 10 s dedup_window (swept every 100 ms), on a
// topic of 4 partitions: every re-send answered before the first invoke
// plus the window (just inside it) answers the first outcome; once a
// shard forgot the id, its messages are answered as new publishes (new
// ids, CREATED), as documented, and the new answer holds for the re-sends
// after it. The history checks clean with the checker told the window,
// and shows the G6 "violations" of a 15-minute make chaos without it.
// The request's messages are due at once.
func TestRequestIDAtTheDedupWindowsEdge(t *testing.T) {
	requestIDAtTheDedupWindowsEdge(t, 0)
}

// TestRequestIDAtTheDedupWindowsEdgeDueLater is the same with the
// request's messages due in an hour: every shard that holds one has
// nothing else due, and still forgets the id within its sweep interval.
// Before, such a shard's dispatcher slept until the hour mark without
// sweeping and no shard forgot the id within the 50 s the test waits.
func TestRequestIDAtTheDedupWindowsEdgeDueLater(t *testing.T) {
	requestIDAtTheDedupWindowsEdge(t, time.Hour)
}

// requestIDAtTheDedupWindowsEdge runs the edge test with the request's
// messages due after delay.
func requestIDAtTheDedupWindowsEdge(t *testing.T, delay time.Duration) {
	const window = 10 * time.Second
	c := New(t, Config{Tune: func(bc *broker.Config) {
		bc.DedupWindow = window
		bc.Testing.SweepInterval = 100 * time.Millisecond
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, parts = "edge", 4
	if _, err := c.Admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: topic, Partitions: parts}}); err != nil {
		t.Fatalf("CreateTopic(%s) error = %v", topic, err)
	}
	waitProxyKnows(t, c.conn, topic, parts)
	req := &sundialv1.PublishRequest{RequestId: "edge-request"}
	// 8 unkeyed messages spread over the partitions, due after delay.
	for i := range 8 {
		req.Messages = append(req.Messages, &sundialv1.Message{Topic: topic, Payload: fmt.Appendf(nil, "edge-%d", i), DelayMs: delay.Milliseconds()})
	}
	rec := history.NewRecorder()
	send := func() []*history.Op {
		ops := make([]*history.Op, len(req.Messages))
		for i, m := range req.Messages {
			ops[i] = rec.Invoke(history.Op{Kind: history.Publish, Client: "edge", Topic: topic, RequestID: req.RequestId, Index: i,
				Payload: string(m.GetPayload()), DelayMs: m.GetDelayMs()})
		}
		res, err := publishAs(t, c.Producer, req.RequestId, req.Messages)
		for i, op := range ops {
			switch {
			case err != nil:
				rec.Complete(op, history.Unknown, err, nil)
			case res[i].GetError() != nil:
				rec.Complete(op, history.Unknown, fmt.Errorf("%v", res[i].GetError()), nil)
			default:
				r := res[i]
				rec.Complete(op, history.OK, nil, func(o *history.Op) {
					o.MessageID, o.DueMs, o.Outcome = r.GetMessageId(), r.GetDueAtUnixMs(), history.Created
				})
			}
		}
		return ops
	}
	var first []*history.Op
	Eventually(t, 30*time.Second, func() error {
		first = send()
		for i, op := range first {
			if op.Answer != history.OK {
				return fmt.Errorf("message %d: %s", i, op.Error)
			}
		}
		return nil
	})
	// The window runs from when a broker stored the id, after the first
	// invoke of any attempt: a re-send answered before began + window was
	// surely answered from the record.
	began := rec.Ops()[0].Invoke

	renewed := make([]*history.Op, len(first)) // per message: the first re-send answered anew
	inside := 0                                // re-sends answered before began + window
	Eventually(t, 50*time.Second, func() error {
		time.Sleep(100 * time.Millisecond)
		for i, op := range send() {
			if op.Answer != history.OK {
				continue
			}
			want := first[i]
			if renewed[i] != nil {
				want = renewed[i]
			}
			switch {
			case op.MessageID == want.MessageID:
				if op.Complete.Before(began.Add(window)) {
					inside++
				}
			case renewed[i] != nil:
				t.Fatalf("message %d answered %s after its renewed answer %s", i, op.MessageID, renewed[i].MessageID)
			case op.MessageID == first[i].MessageID:
			case op.Complete.Before(began.Add(window)):
				t.Fatalf("message %d answered %s, not the first answer's %s, %v after the first invoke: inside the %v window",
					i, op.MessageID, first[i].MessageID, op.Complete.Sub(began), window)
			default:
				renewed[i] = op
			}
		}
		for i, r := range renewed {
			if r == nil {
				return fmt.Errorf("message %d still answered as at the first invoke", i)
			}
		}
		return nil
	})
	if inside == 0 {
		t.Errorf("no re-send was answered inside the window: the first outcome inside it went untested")
	}
	t.Logf("%d re-sent answers inside the %v window, the last message renewed %v after the first invoke",
		inside, window, latest(renewed).Complete.Sub(began))

	ops := rec.Ops()
	groups := map[string][]string{topic: {"default"}}
	if res := checker.Check(checker.Config{Groups: groups, DedupWindow: window, SkipLiveness: true}, ops); len(res.Violations) > 0 {
		t.Errorf("Check(window %v) = %s, want no violations", window, res)
	}
	if res := checker.Check(checker.Config{Groups: groups, SkipLiveness: true}, ops); res.ByProperty()["G6"] < len(first) {
		t.Errorf("Check(no window) = %s, want a G6 violation per message (a request id answered anew)", res)
	}
}

func latest(ops []*history.Op) *history.Op {
	out := ops[0]
	for _, op := range ops[1:] {
		if op.Complete.After(out.Complete) {
			out = op
		}
	}
	return out
}
