package ui

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/integration"
)

// maxScreenshotBytes keeps the checked-in images small.
const maxScreenshotBytes = 300 << 10

// TestScreenshots writes a PNG of each UI page into $SUNDIAL_SCREENSHOTS
// (`make screenshots` sets it to docs/images) over a small, fixed
// workload on a three-broker cluster; without the variable it skips.
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("SUNDIAL_SCREENSHOTS")
	if dir == "" {
		t.Skip("SUNDIAL_SCREENSHOTS is not set (make screenshots sets it to docs/images)")
	}
	chromiumPath(t)
	c := integration.New(t, integration.Config{Brokers: 3, Shards: 4})
	f := &fixture{c: c, base: "http://" + c.Proxy.HTTPAddr()}
	for _, topic := range []string{"orders", "emails", "reports"} {
		f.createTopic(t.Context(), t, topic)
	}
	// orders: a wave over the next hour; emails: some due now (then
	// received, so in flight with a lateness), some in the next minutes;
	// reports: a daily batch.
	for i := range 24 {
		var payloads []string
		for j := range 4 + (i*7)%11 {
			payloads = append(payloads, fmt.Sprintf(`{"order":%d,"line":%d,"sku":"SKU-%03d"}`, i, j, (i*13+j)%200))
		}
		f.publish(t.Context(), t, "orders", time.Duration(i)*150*time.Second+30*time.Second, payloads...)
	}
	f.publish(t.Context(), t, "emails", 0, "welcome alice", "welcome bob", "reset password carol", "digest dave", "digest erin", "digest frank")
	f.publish(t.Context(), t, "emails", 4*time.Minute, "reminder 1", "reminder 2", "reminder 3")
	f.publish(t.Context(), t, "reports", 3*time.Hour, "daily revenue", "daily signups")
	integration.Eventually(t, 30*time.Second, func() error {
		resp, err := c.Consumer.Receive(ctxT(t), &sundialv1.ReceiveRequest{Topic: "emails", MaxMessages: 2, WaitMs: 1000, VisibilityTimeoutMs: 600_000})
		if err != nil || len(resp.GetDeliveries()) == 0 {
			return fmt.Errorf("receive emails: %w (%d deliveries)", err, len(resp.GetDeliveries()))
		}
		return nil
	})

	ctx := newBrowser(t)
	shots := []struct {
		name, path, wait string
		click            string // clicked before the shot, if set
		scroll           string // scrolled into view before the shot, if set
	}{
		{"ui-cluster.png", "/ui/cluster", "#shards", "", ""},
		{"ui-topics.png", "/ui/topics", "#topics", "", ""},
		{"ui-topic.png", "/ui/topics/orders?range=hour", "#histogram", "", ""},
		{"ui-messages.png", "/ui/topics/orders?view=json", "#messages", "", "#messages"},
		{"ui-confirm.png", "/ui/topics/orders", "#messages", "#messages button.cancel", ""},
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, s := range shots {
		do(ctx, t, "open "+s.path, chromedp.Navigate(f.base+s.path), chromedp.WaitVisible(chromedp.CSS(s.wait)))
		if s.click != "" {
			do(ctx, t, "click "+s.click, chromedp.Click(chromedp.CSS(s.click)), chromedp.WaitVisible(chromedp.CSS("#confirm")))
		}
		if s.scroll != "" {
			do(ctx, t, "scroll to "+s.scroll, chromedp.ScrollIntoView(chromedp.CSS(s.scroll)))
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("screenshot %s: %v", s.name, err)
		}
		if len(png) > maxScreenshotBytes {
			t.Errorf("%s is %d KB, want at most %d KB", s.name, len(png)>>10, maxScreenshotBytes>>10)
		}
		if err := os.WriteFile(filepath.Join(dir, s.name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d KB)", filepath.Join(dir, s.name), len(png)>>10)
	}
}
