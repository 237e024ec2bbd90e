package faults

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/workload"
)

// TestDebounceAtItsCapRacesDelivery rewrites keyed messages with DEBOUNCE
// every 40 ms across their due time, once DEBOUNCE has reached its
// max_wait cap (the due time no longer moves): every DEBOUNCED answer's
// payload must reach both groups unless they acked before the answer, and
// nothing delivered after an answer may carry an older payload (G5).
// Today (finding 1) about one run in four shows a DEBOUNCED payload that
// never arrives while the old one is delivered after the answer.
func TestDebounceAtItsCapRacesDelivery(t *testing.T) {
	_, w, ctx := start(t, "debounce-cap", 2)
	// The window is narrow (a DEBOUNCE applied between a round's scan and
	// its lease): three rounds of 20 keys give it more chances.
	for round := range 3 {
		debounceAcrossDue(ctx, w, round)
	}
	check(t, w)
}

// debounceAcrossDue creates 20 keys and debounces each every 40 ms for
// 1.6 s, past its capped due time.
func debounceAcrossDue(ctx context.Context, w *workload.Workload, round int) {
	var wg sync.WaitGroup
	for k := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("cap-%d-%d", round, k)
			msg := func(i int) *sundialv1.Message {
				return &sundialv1.Message{Topic: "debounce-cap", Key: key, OnKeyConflict: sundialv1.KeyConflict_KEY_CONFLICT_DEBOUNCE,
					Payload: fmt.Appendf(nil, "%s-%d", key, i), DelayMs: 800, MaxWaitMs: 1000}
			}
			end := time.Now().Add(1600 * time.Millisecond)
			for i := 0; time.Now().Before(end); i++ {
				w.Publish(ctx, fmt.Sprintf("debouncer-%d", k), msg(i))
				time.Sleep(40 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}
