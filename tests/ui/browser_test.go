package ui

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// browserStepTimeout bounds one browser step (a navigation, a click and
// what it waits for).
const browserStepTimeout = 30 * time.Second

// chromiumPath finds Debian's chromium (or SUNDIAL_CHROMIUM). Without
// one the browser tests skip, except in CI (CI=true), where .ci/run
// installs it and its absence is a failure.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("SUNDIAL_CHROMIUM"), "/usr/bin/chromium", "/usr/bin/chromium-browser"} {
		if p == "" {
			continue
		}
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium not found at /usr/bin/chromium (or SUNDIAL_CHROMIUM): CI must run the browser tests; .ci/run installs Debian's chromium")
	}
	t.Skip("chromium not found at /usr/bin/chromium (or SUNDIAL_CHROMIUM): browser tests skipped; install Debian's chromium to run them")
	return ""
}

// newBrowser starts headless chromium for t, stopped at cleanup, and
// answers its tab's context.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox,
		chromedp.Headless,
		chromedp.DisableGPU,
		chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelTab(); cancelAlloc() })
	// The first Run starts the browser and lives as long as ctx: no
	// timeout on it, but a bound on the whole start.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start chromium: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("chromium did not start within 60s")
	}
	return ctx
}

// do runs steps with a timeout, failing t with what was being done.
func do(ctx context.Context, t *testing.T, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserStepTimeout)
	defer cancel()
	if err := chromedp.Do(sctx, steps...); err != nil {
		t.Fatalf("browser: %s: %v", what, err)
	}
}

// text answers the text of the first element matching css.
func text(ctx context.Context, t *testing.T, css string) string {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserStepTimeout)
	defer cancel()
	s, err := chromedp.Run(sctx, chromedp.Text(chromedp.CSS(css)))
	if err != nil {
		t.Fatalf("browser: text of %s: %v", css, err)
	}
	return strings.TrimSpace(s)
}

func eval[T any](ctx context.Context, t *testing.T, js string) T {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, browserStepTimeout)
	defer cancel()
	v, err := chromedp.Run(sctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("browser: evaluate %s: %v", js, err)
	}
	return v
}

// TestBrowser drives the UI in headless Chromium against a real cluster:
// what gRPC did shows in the pages, and what the browser does shows
// through gRPC.
func TestBrowser(t *testing.T) {
	path := chromiumPath(t)
	t.Logf("chromium: %s", path)
	f := newFixture(t)
	f.createTopic(t.Context(), t, "shop")
	ids := f.publish(t.Context(), t, "shop", 20*time.Minute, `{"sku":"a-1"}`, "second", "third")
	ctx := newBrowser(t)

	t.Run("topics page lists the topic with its counts", func(t *testing.T) {
		// The counts are the leaders' at the time of the page: poll.
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			do(ctx, t, "open topics", chromedp.Navigate(f.base+"/ui/topics"),
				chromedp.WaitVisible(chromedp.CSS(`tr[data-topic="shop"][data-group="billing"] td.scheduled`)))
			var wrong []string
			for _, g := range []string{"default", "billing"} {
				if got := text(ctx, t, `tr[data-topic="shop"][data-group="`+g+`"] td.scheduled`); got != "3" {
					wrong = append(wrong, fmt.Sprintf("shop/%s scheduled = %q, want 3", g, got))
				}
			}
			if len(wrong) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("topics page after 30s: %v", wrong)
			}
		}
		// The topic's name links to its page.
		do(ctx, t, "follow the topic link", chromedp.Click(chromedp.CSS(`tr[data-topic="shop"] a`)),
			chromedp.WaitVisible(chromedp.CSS(`#topic-name`)))
		if got := text(ctx, t, "#topic-name"); got != "shop" {
			t.Fatalf("topic page name = %q, want shop", got)
		}
	})

	t.Run("histogram shows the scheduled messages", func(t *testing.T) {
		do(ctx, t, "open topic page (next hour)", chromedp.Navigate(f.base+"/ui/topics/shop?range=hour"),
			chromedp.WaitVisible(chromedp.CSS(`#histogram`)))
		sum := eval[int](ctx, t, `[...document.querySelectorAll('#histogram rect.bar')].reduce((s, r) => s + Number(r.dataset.count), 0)`)
		tall := eval[int](ctx, t, `[...document.querySelectorAll('#histogram rect.bar')].filter(r => r.getBBox().height > 0).length`)
		if sum != 3 || tall != 1 {
			t.Fatalf("histogram bars count %d messages in %d non-empty bars, want 3 in 1 (all due in 20m)", sum, tall)
		}
		// The next minute holds none of them.
		do(ctx, t, "switch to the next minute", chromedp.Click(chromedp.CSS(`.tabs a[href*="range=minute"]`)),
			chromedp.WaitVisible(chromedp.CSS(`.tabs a.current[href*="range=minute"]`)))
		if got := text(ctx, t, "#histogram-total"); got != "0" {
			t.Fatalf("next-minute histogram total = %q, want 0", got)
		}
	})

	t.Run("cancelling a message from the browser removes it", func(t *testing.T) {
		row := `tr[data-id="` + ids[0] + `"]`
		do(ctx, t, "open topic page", chromedp.Navigate(f.base+"/ui/topics/shop"), chromedp.WaitVisible(chromedp.CSS(row)))
		do(ctx, t, "click cancel", chromedp.Click(chromedp.CSS(row+` button.cancel`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
		if _, err := f.c.Admin.GetMessage(rpcCtx(ctx, t), getByID("shop", ids[0])); err != nil {
			t.Fatalf("message gone before the confirmation: %v", err)
		}
		do(ctx, t, "confirm", chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#notice`)))
		if got := text(ctx, t, "#notice"); !strings.Contains(got, "DONE") {
			t.Fatalf("notice after cancel = %q, want DONE", got)
		}
		if _, err := f.c.Admin.GetMessage(rpcCtx(ctx, t), getByID("shop", ids[0])); status.Code(err) != codes.NotFound {
			t.Fatalf("GetMessage(cancelled) error = %v, want NotFound", err)
		}
		if n := eval[int](ctx, t, `document.querySelectorAll('tr[data-id="`+ids[0]+`"]').length`); n != 0 {
			t.Fatalf("cancelled message still listed in the page")
		}
	})

	t.Run("a failed action shows its error", func(t *testing.T) {
		row := `tr[data-id="` + ids[1] + `"]`
		do(ctx, t, "open topic page", chromedp.Navigate(f.base+"/ui/topics/shop"), chromedp.WaitVisible(chromedp.CSS(row)))
		do(ctx, t, "reschedule by 9000h",
			chromedp.SetValue(chromedp.CSS(row+` input[name="delay"]`), "9000h"),
			chromedp.Click(chromedp.CSS(row+` button.reschedule`)),
			chromedp.WaitVisible(chromedp.CSS(`#error`)))
		got := text(ctx, t, "#error")
		if !strings.Contains(got, "400 InvalidArgument") || !strings.Contains(got, "delay_ms") {
			t.Fatalf("error shown = %q, want 400 InvalidArgument naming delay_ms", got)
		}
		// The rest of the page is still there.
		if n := eval[int](ctx, t, `document.querySelectorAll('#messages tr[data-id]').length`); n != 2 {
			t.Fatalf("error page lists %d messages, want the 2 left", n)
		}
	})

	t.Run("the topics page refreshes itself", func(t *testing.T) {
		do(ctx, t, "open topics", chromedp.Navigate(f.base+"/ui/topics"), chromedp.WaitVisible(chromedp.CSS(`#topics`)))
		eval[bool](ctx, t, `window.sundialTestMark = true`)
		f.createTopic(ctx, t, "later")
		f.publish(ctx, t, "later", time.Hour, "x")
		// htmx reloads the table every 5s; no navigation happens.
		do(ctx, t, "wait for the new topic's row", chromedp.WaitVisible(chromedp.CSS(`tr[data-topic="later"][data-group="default"] td.scheduled`)))
		if got := text(ctx, t, `tr[data-topic="later"][data-group="default"] td.scheduled`); got != "1" {
			t.Fatalf("refreshed row: later/default scheduled = %q, want 1", got)
		}
		if !eval[bool](ctx, t, `window.sundialTestMark === true`) {
			t.Fatal("the page was reloaded, not refreshed in place")
		}
	})

	t.Run("without JavaScript", func(t *testing.T) {
		do(ctx, t, "disable scripts", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true})
			return err
		}))
		t.Cleanup(func() {
			do(ctx, t, "enable scripts", chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := cdp.Call(ctx, tg, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: false})
				return err
			}))
		})
		do(ctx, t, "open topics", chromedp.Navigate(f.base+"/ui/topics"),
			chromedp.WaitVisible(chromedp.CSS(`tr[data-topic="shop"][data-group="default"] td.scheduled`)))
		if htmx := eval[bool](ctx, t, `typeof window.htmx !== 'undefined'`); htmx {
			t.Fatal("scripts still run")
		}
		if got := text(ctx, t, `tr[data-topic="shop"][data-group="default"] td.scheduled`); got != "2" {
			t.Fatalf("topics page without JS: scheduled = %q, want 2", got)
		}
		row := `tr[data-id="` + ids[2] + `"]`
		do(ctx, t, "cancel without JS", chromedp.Navigate(f.base+"/ui/topics/shop"),
			chromedp.Click(chromedp.CSS(row+` button.cancel`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm`)), chromedp.WaitVisible(chromedp.CSS(`#notice`)))
		if _, err := f.c.Admin.GetMessage(rpcCtx(ctx, t), getByID("shop", ids[2])); status.Code(err) != codes.NotFound {
			t.Fatalf("GetMessage(cancelled without JS) error = %v, want NotFound", err)
		}
	})

	// Last: it stops the proxy.
	t.Run("a proxy that stops answering is said so", func(t *testing.T) {
		do(ctx, t, "open topics", chromedp.Navigate(f.base+"/ui/topics"), chromedp.WaitVisible(chromedp.CSS(`#topics`)))
		f.c.Proxy.Stop()
		do(ctx, t, "wait for the offline notice", chromedp.WaitVisible(chromedp.CSS(`#offline`)))
		if got := text(ctx, t, "#offline"); !strings.Contains(got, "did not answer") {
			t.Fatalf("offline notice = %q", got)
		}
		if n := eval[int](ctx, t, `document.querySelectorAll('#topics tr[data-topic]').length`); n == 0 {
			t.Fatal("the last table is gone: the page went blank")
		}
	})
}

func getByID(topic, id string) *sundialv1.GetMessageRequest {
	return &sundialv1.GetMessageRequest{Message: &sundialv1.MessageSelector{Topic: topic, By: &sundialv1.MessageSelector_MessageId{MessageId: id}}}
}
