package faults

import (
	"fmt"
	"sync"
	"testing"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// TestDebounceAtItsCapRacesDelivery rewrites keyed messages with DEBOUNCE
// every 40 ms across their due time, once DEBOUNCE has reached its
// max_wait cap (the due time no longer moves): every DEBOUNCED answer's
// payload must reach both groups unless they acked before the answer, and
// nothing delivered after an answer may carry an older payload (G5).
func TestDebounceAtItsCapRacesDelivery(t *testing.T) {
	_, w, ctx := start(t, "debounce-cap", 2)
	var wg sync.WaitGroup
	for k := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("cap-%d", k)
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
	check(t, w)
}
