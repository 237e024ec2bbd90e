package integration

import (
	"fmt"
	"testing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// A 10,000-message batch to a topic the cluster does not know yet creates
// the topic on its first publish and stores every message: each broker
// creates a topic once per request, not once per message (which made
// 10,000 meta proposals and answered DeadlineExceeded for every message).
// The call has no deadline of its own: the test asserts outcomes, not time.
func TestPublishBatchToANewTopic(t *testing.T) {
	c := New(t, Config{})
	const n = 10_000
	msgs := make([]*sundialv1.Message, n)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: "new-batch", Payload: []byte(fmt.Sprint(i)), DelayMs: 3_600_000}
	}
	resp, err := c.Producer.Publish(t.Context(), &sundialv1.PublishRequest{Messages: msgs})
	if err != nil {
		t.Fatalf("Publish(%d messages to a new topic) error = %v", n, err)
	}
	if len(resp.GetResults()) != n {
		t.Fatalf("Publish() answered %d results for %d messages", len(resp.GetResults()), n)
	}
	failed := 0
	var first *sundialv1.PublishResult
	for _, r := range resp.GetResults() {
		if r.GetError() != nil || r.GetMessageId() == "" {
			if failed == 0 {
				first = r
			}
			failed++
		}
	}
	if failed > 0 {
		t.Fatalf("%d of %d messages failed, the first with %v", failed, n, first)
	}
	if _, err := c.Admin.GetTopic(t.Context(), &sundialv1.GetTopicRequest{Name: "new-batch"}); err != nil {
		t.Fatalf("GetTopic(new-batch) after the publish = %v, want the topic created", err)
	}
}
