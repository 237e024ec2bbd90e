package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// REPLACEs racing the round that delivers their messages: whatever each
// answers, the consumer receives the payloads that answer promised. A
// REPLACED message is delivered with the new payload only, never the old
// one; a CREATED answer (its delivery had begun) is a second message, and
// both payloads arrive.
func TestReplaceRacingDelivery(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 1})
	const n = 60
	due := time.Now().Add(400 * time.Millisecond).UnixMilli()
	ids := map[string]string{}
	for i := range n {
		r := publish(t, c, &sundialv1.Message{Topic: "rewrite", Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint("old-", i)), DeliverAtUnixMs: due})
		ids[fmt.Sprint(i)] = r[0].MessageId
	}
	sub := c.Subscribe("rewrite", "", 2*n, 0)
	// Begin just before the due time, so the REPLACEs straddle the round
	// that delivers the messages. Same due time: only the content version
	// tells a rewritten message from the one a round read just before.
	time.Sleep(time.Until(time.UnixMilli(due - 15)))
	outcome := make([]*sundialv1.PublishResult, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				m := &sundialv1.Message{Topic: "rewrite", Key: fmt.Sprint("k", i), Payload: []byte(fmt.Sprint("new-", i)), DeliverAtUnixMs: due, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_REPLACE}
				resp, err := c.Producer.Publish(ctx10(t), &sundialv1.PublishRequest{Messages: []*sundialv1.Message{m}})
				if err != nil || resp.Results[0].Error != nil {
					t.Errorf("REPLACE %d = %v, %v", i, resp, err)
					return
				}
				outcome[i] = resp.Results[0]
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// The payloads the answers promise must all arrive: wait for them
	// without a bound that a busy machine decides, then 1.5 s more for an
	// old payload of a REPLACED message that must not.
	want := map[string]bool{}
	for i, o := range outcome {
		want[fmt.Sprint("new-", i)] = true
		if o.GetKeyOutcome() == sundialv1.KeyOutcome_KEY_OUTCOME_CREATED {
			want[fmt.Sprint("old-", i)] = true
		}
	}
	delivered := map[string]string{} // payload → message id
	for {
		wait := 1500 * time.Millisecond
		for p := range want {
			if _, ok := delivered[p]; !ok {
				wait = 30 * time.Second
				break
			}
		}
		d, ok := sub.Next(wait)
		if !ok {
			break
		}
		if prev, dup := delivered[string(d.Payload)]; dup && prev == d.MessageId {
			continue // a redelivery of the same contents
		}
		delivered[string(d.Payload)] = d.MessageId
	}
	replaced := 0
	for i := range n {
		old, nu := fmt.Sprint("old-", i), fmt.Sprint("new-", i)
		switch o := outcome[i]; o.KeyOutcome {
		case sundialv1.KeyOutcome_KEY_OUTCOME_REPLACED:
			replaced++
			if _, ok := delivered[old]; ok {
				t.Fatalf("message %d answered REPLACED, yet its old payload was delivered", i)
			}
			if delivered[nu] != ids[fmt.Sprint(i)] {
				t.Fatalf("message %d answered REPLACED: new payload delivered as %q, want id %s", i, delivered[nu], ids[fmt.Sprint(i)])
			}
		case sundialv1.KeyOutcome_KEY_OUTCOME_CREATED:
			if delivered[old] != ids[fmt.Sprint(i)] || delivered[nu] != o.MessageId {
				t.Fatalf("message %d answered CREATED %s: delivered old as %q, new as %q; want both", i, o.MessageId, delivered[old], delivered[nu])
			}
		default:
			t.Fatalf("message %d: REPLACE answered %v", i, o.KeyOutcome)
		}
	}
	t.Logf("%d of %d REPLACEs answered REPLACED, the rest CREATED", replaced, n)
}
