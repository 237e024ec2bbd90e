package dispatch

import (
	"testing"
	"time"
)

// A consumer that grants credit but does not read: what the broker buffers
// for it stays within MaxCredit, counting buffered deliveries.
func TestCreditCapIncludesBuffered(t *testing.T) {
	r := newRigWith(t, Config{MaxCredit: 50})
	c := NewConsumer("t", "default", []uint32{0}, time.Minute, false, 1000)
	r.d.Attach(c)
	now := time.Now().UnixMilli()
	dues := make([]int64, 120)
	for i := range dues {
		dues[i] = now
	}
	r.publish("t", dues...)
	waitFor(t, 10*time.Second, "50 buffered deliveries", func() bool { return c.buffered() >= 50 })
	if got := r.d.AddCredit(c, 1<<30); got != 0 {
		t.Fatalf("AddCredit(2^30) with 50 buffered = %d, want 0 within a cap of 50", got)
	}
	r.d.Wake()
	time.Sleep(100 * time.Millisecond) // a round that must not push more
	if n := c.buffered(); n != 50 {
		t.Fatalf("buffered %d deliveries for a reader that took none, want the cap of 50", n)
	}
	taken := len(c.Take())
	if got := r.d.AddCredit(c, 1<<30); got != 50 {
		t.Fatalf("AddCredit(2^30) after taking %d = %d, want 50", taken, got)
	}
	waitFor(t, 10*time.Second, "the buffer to refill", func() bool { return c.buffered() >= 50 })
	time.Sleep(100 * time.Millisecond)
	if n := c.buffered(); n != 50 {
		t.Fatalf("buffered %d after refilling, want 50", n)
	}
}
