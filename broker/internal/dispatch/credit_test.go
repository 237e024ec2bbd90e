package dispatch

import (
	"testing"
	"testing/synctest"
	"time"
)

// A consumer that grants far more credit than it reads: the deliveries
// the broker holds for it stay within MaxCredit, and the rest of its
// credit is kept, not lost, and spent as it takes.
func TestCreditCapIncludesBuffered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRigWith(t, Config{MaxCredit: 50})
		c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 1000)
		r.d.Attach(c)
		r.d.AddCredit(c, 1<<30)
		now := time.Now().UnixMilli()
		dues := make([]int64, 120)
		for i := range dues {
			dues[i] = now
		}
		r.publish("t", dues...)
		synctest.Wait() // every round that could push has run
		if n := c.buffered(); n != 50 {
			t.Fatalf("buffered %d deliveries for a reader that took none, want the cap of 50", n)
		}
		// Taking makes room and wakes the dispatcher; no new credit is needed.
		if n := len(c.Take()); n != 50 {
			t.Fatalf("Take() = %d deliveries, want 50", n)
		}
		synctest.Wait()
		if n := c.buffered(); n != 50 {
			t.Fatalf("buffered %d after refilling, want 50", n)
		}
		if got, want := r.d.Revoke(c, 1<<31-1), 1000+1<<30-100; got != want {
			t.Fatalf("Revoke(all) = %d, want the %d granted and not spent", got, want)
		}
	})
}
