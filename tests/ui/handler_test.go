package ui

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/integration"
)

// TestPages checks the read-only pages over HTTP against a real cluster:
// what gRPC created and published is what the pages show, escaped.
func TestPages(t *testing.T) {
	f := newFixture(t)
	f.createTopic(t.Context(), t, "orders")
	ids := f.publish(t.Context(), t, "orders", 10*time.Minute, `{"order":1}`, "<script>alert(1)</script>", "plain")

	t.Run("topics", func(t *testing.T) {
		integration.Eventually(t, 20*time.Second, func() error {
			code, body := f.get(t, "/ui/topics")
			if code != http.StatusOK {
				return fmt.Errorf("GET /ui/topics = %d, want 200: %s", code, body)
			}
			for _, group := range []string{"default", "billing"} {
				row := `<tr data-topic="orders" data-group="` + group + `">`
				i := strings.Index(body, row)
				if i < 0 {
					return fmt.Errorf("no row for orders/%s in %s", group, body)
				}
				if !strings.Contains(body[i:], `class="num scheduled">3<`) {
					return fmt.Errorf("orders/%s: scheduled is not 3: %s", group, body[i:min(len(body), i+600)])
				}
			}
			return nil
		})
	})
	t.Run("topic detail", func(t *testing.T) {
		code, body := f.get(t, "/ui/topics/orders?range=hour")
		if code != http.StatusOK {
			t.Fatalf("GET /ui/topics/orders = %d, want 200: %s", code, body)
		}
		if !strings.Contains(body, `<span id="histogram-total">3</span>`) {
			t.Errorf("topic page histogram does not count 3 messages: %s", body)
		}
		for _, id := range ids {
			if !strings.Contains(body, `data-id="`+id+`"`) {
				t.Errorf("message browser lacks message %s: %s", id, body)
			}
		}
		if strings.Contains(body, "<script>alert(1)</script>") || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Errorf("payload <script> is not escaped")
		}
		// The JSON view indents a JSON payload; hex shows bytes.
		_, body = f.get(t, "/ui/topics/orders?view=json")
		if !strings.Contains(body, "{\n  &#34;order&#34;: 1\n}") {
			t.Errorf("JSON view does not indent the JSON payload")
		}
		_, body = f.get(t, "/ui/topics/orders?view=hex&key_prefix=nomatch")
		if !strings.Contains(body, "No scheduled messages match.") {
			t.Errorf("key prefix filter nomatch still lists messages")
		}
		_, body = f.get(t, "/ui/topics/orders?header_key=n&header_value=2&view=hex")
		if !strings.Contains(body, `data-id="`+ids[2]+`"`) || strings.Contains(body, `data-id="`+ids[0]+`"`) || !strings.Contains(body, "70 6c 61 69 6e") {
			t.Errorf("header filter n=2 in hex does not show exactly %s as hex", ids[2])
		}
		// htmx's refresh of the live part skips the message browser.
		req, _ := http.NewRequest(http.MethodGet, f.base+"/ui/topics/orders", nil)
		req.Header.Set("HX-Request", "true")
		req.Header.Set("HX-Target", "live")
		resp, err := f.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := f.read(t, resp); code != http.StatusOK || !strings.Contains(body, `<span id="histogram-total">3</span>`) || strings.Contains(body, `data-id="`) {
			t.Errorf("live refresh = %d, want the chart without the message rows", code)
		}
		// A due range that ends before the messages are due lists none.
		_, body = f.get(t, "/ui/topics/orders?to=5m")
		if strings.Contains(body, `data-id="`) {
			t.Errorf("due range to=5m lists messages due in 10m")
		}
	})
	t.Run("message browser pages", func(t *testing.T) {
		f.createTopic(t.Context(), t, "many")
		payloads := make([]string, 60)
		for i := range payloads {
			payloads[i] = fmt.Sprint("m", i)
		}
		want := map[string]bool{}
		for _, id := range f.publish(t.Context(), t, "many", time.Hour, payloads...) {
			want[id] = true
		}
		seen := map[string]bool{}
		next := "/ui/topics/many?group=billing"
		for page := 0; next != ""; page++ {
			if page > 3 {
				t.Fatalf("more than 3 pages for 60 messages")
			}
			code, body := f.get(t, next)
			if code != http.StatusOK {
				t.Fatalf("GET %s = %d", next, code)
			}
			for _, m := range regexp.MustCompile(`<tr data-id="([0-9a-f]+)">`).FindAllStringSubmatch(body, -1) {
				if seen[m[1]] {
					t.Fatalf("message %s listed twice", m[1])
				}
				seen[m[1]] = true
			}
			next = ""
			if m := regexp.MustCompile(`<a href="([^"]+)" id="next-page">`).FindStringSubmatch(body); m != nil {
				next = html.UnescapeString(m[1])
				if !strings.Contains(next, "group=billing") {
					t.Fatalf("next page %s drops the group", next)
				}
			}
		}
		if len(seen) != len(want) {
			t.Fatalf("pages listed %d messages, want %d", len(seen), len(want))
		}
	})
	t.Run("cluster", func(t *testing.T) {
		code, body := f.get(t, "/ui/cluster")
		if code != http.StatusOK {
			t.Fatalf("GET /ui/cluster = %d, want 200: %s", code, body)
		}
		info, err := f.c.Admin.GetClusterInfo(ctxT(t), &sundialv1.GetClusterInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`<strong id="routing-version">%d</strong>`, info.GetRoutingVersion()); !strings.Contains(body, want) {
			t.Errorf("cluster page lacks %s", want)
		}
		if !strings.Contains(body, info.GetNodes()[0].GetGrpcAddr()) || strings.Count(body, "<tr><td>") < 2 {
			t.Errorf("cluster page lacks the node and its shards: %s", body)
		}
		// The one broker leads meta: its healer's rounds say when it was
		// last seen (the first round comes within a second of its start).
		integration.Eventually(t, 20*time.Second, func() error {
			_, body := f.get(t, "/ui/cluster")
			if !strings.Contains(body, "<th>last seen</th>") || !regexp.MustCompile(`</td><td>\d+s ago</td>`).MatchString(body) {
				return fmt.Errorf("cluster page shows no last seen time of the node: %s", body)
			}
			return nil
		})
	})
	t.Run("errors", func(t *testing.T) {
		code, body := f.get(t, "/ui/topics/nosuch")
		if code != http.StatusNotFound || !strings.Contains(body, "NotFound") {
			t.Errorf("GET /ui/topics/nosuch = %d, want 404 with NotFound: %s", code, body)
		}
		code, body = f.get(t, "/ui/topics/orders?from=yesterday")
		if code != http.StatusOK || !strings.Contains(body, `id="list-error"`) || !strings.Contains(body, "<code>from</code>") {
			t.Errorf("a bad due range is not shown in the message browser: %d %s", code, body)
		}
		code, _ = f.get(t, "/ui/nosuch")
		if code != http.StatusNotFound {
			t.Errorf("GET /ui/nosuch = %d, want 404", code)
		}
		code, body = f.get(t, "/ui/static/htmx.min.js")
		if code != http.StatusOK || !strings.Contains(body, "htmx") {
			t.Errorf("GET htmx.min.js = %d", code)
		}
	})
	t.Run("no broker answers", func(t *testing.T) {
		f.c.StopBroker(0)
		for _, path := range []string{"/ui/cluster", "/ui/topics"} {
			code, body := f.get(t, path)
			// The error is inside the live part, so a refresh shows it too.
			live := body[max(0, strings.Index(body, `id="live"`)):]
			if code < 500 || !strings.Contains(live, `id="error"`) {
				t.Errorf("GET %s with the broker stopped = %d, want 5xx with the error in the live part: %s", path, code, body)
			}
		}
	})
}

// TestActions runs every action over HTTP and checks its effect through
// gRPC.
func TestActions(t *testing.T) {
	f := newFixture(t)
	f.createTopic(t.Context(), t, "jobs")
	ids := f.publish(t.Context(), t, "jobs", 10*time.Minute, "a", "b", "c")
	msg := func(id string) (*sundialv1.MessageInfo, error) {
		return f.c.Admin.GetMessage(ctxT(t), &sundialv1.GetMessageRequest{Message: &sundialv1.MessageSelector{Topic: "jobs", By: &sundialv1.MessageSelector_MessageId{MessageId: id}}})
	}
	redirected := func(t *testing.T, resp answer, body, notice string) {
		t.Helper()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/topics/jobs?") {
			t.Fatalf("status %d Location %q, want 303 to the topic page: %s", resp.StatusCode, loc, body)
		}
		u, _ := url.Parse(loc)
		if got := u.Query().Get("notice"); !strings.Contains(got, notice) {
			t.Fatalf("notice %q, want it to contain %q", got, notice)
		}
	}

	t.Run("cancel asks first, then cancels", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/cancel", url.Values{"message_id": {ids[0]}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `name="confirm" value="yes"`) {
			t.Fatalf("cancel without confirm = %d, want the confirmation page: %s", resp.StatusCode, body)
		}
		if _, err := msg(ids[0]); err != nil {
			t.Fatalf("message cancelled before confirmation: GetMessage error = %v", err)
		}
		resp, body = f.post(t, "/ui/topics/jobs/cancel", url.Values{"message_id": {ids[0]}, "confirm": {"yes"}, "back": {"range=day"}})
		redirected(t, resp, body, "DONE")
		if !strings.Contains(resp.Header.Get("Location"), "range=day") {
			t.Errorf("cancel does not return to the page it came from: %s", resp.Header.Get("Location"))
		}
		if _, err := msg(ids[0]); status.Code(err) != codes.NotFound {
			t.Fatalf("GetMessage(cancelled) error = %v, want NotFound", err)
		}
	})
	t.Run("cross-origin post refused", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/cancel", url.Values{"message_id": {ids[1]}, "confirm": {"yes"}}, "Sec-Fetch-Site", "cross-site")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
			t.Fatalf("cross-site cancel = %d, want 403: %s", resp.StatusCode, body)
		}
		resp, _ = f.post(t, "/ui/topics/jobs/cancel", url.Values{"message_id": {ids[1]}, "confirm": {"yes"}}, "Sec-Fetch-Site", "", "Origin", "http://evil.example")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("cancel with a foreign Origin = %d, want 403", resp.StatusCode)
		}
		if _, err := msg(ids[1]); err != nil {
			t.Fatalf("refused cancel removed the message: %v", err)
		}
	})
	t.Run("reschedule and deliver now", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/reschedule", url.Values{"message_id": {ids[1]}, "delay": {"2h"}})
		redirected(t, resp, body, "DONE")
		m, err := msg(ids[1])
		if err != nil {
			t.Fatal(err)
		}
		if until := time.Until(time.UnixMilli(m.GetDueAtUnixMs())); until < 90*time.Minute {
			t.Fatalf("rescheduled by 2h, due in %s", until)
		}
		resp, body = f.post(t, "/ui/topics/jobs/deliver-now", url.Values{"message_id": {ids[1]}})
		redirected(t, resp, body, "DONE")
		integration.Eventually(t, 20*time.Second, func() error {
			if m, err := msg(ids[1]); err == nil && time.Until(time.UnixMilli(m.GetDueAtUnixMs())) > time.Minute {
				return fmt.Errorf("delivered now but due at %d", m.GetDueAtUnixMs())
			}
			return nil
		})
	})
	t.Run("bad reschedule shows the API error", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/reschedule", url.Values{"message_id": {ids[2]}, "delay": {"9000h"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "InvalidArgument") || !strings.Contains(body, "<code>delay_ms</code>") {
			t.Fatalf("reschedule by 9000h = %d, want 400 showing InvalidArgument on delay_ms: %s", resp.StatusCode, body)
		}
		// The page is the whole topic page, not a blank one.
		if !strings.Contains(body, `id="messages"`) {
			t.Errorf("the error page lacks the message browser")
		}
	})
	t.Run("publish", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/publish", url.Values{"payload": {"from the ui"}, "delay": {"30"}, "key": {"k1"}, "headers": {"source=ui"}})
		redirected(t, resp, body, "published ")
		m, err := f.c.Admin.GetMessage(ctxT(t), &sundialv1.GetMessageRequest{Message: &sundialv1.MessageSelector{Topic: "jobs", By: &sundialv1.MessageSelector_Key{Key: "k1"}}})
		if err != nil || string(m.GetPayload()) != "from the ui" || m.GetHeaders()["source"] != "ui" {
			t.Fatalf("GetMessage(k1) = %v, %v, want the published payload and header", m, err)
		}
		resp, body = f.post(t, "/ui/topics/jobs/publish", url.Values{"payload": {"x"}, "headers": {"no-equals"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "<code>headers</code>") {
			t.Fatalf("publish with a bad header line = %d, want 400 naming headers", resp.StatusCode)
		}
	})
	t.Run("settings", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/settings", url.Values{"max_attempts": {"7"}, "jitter_ms": {"0"}})
		redirected(t, resp, body, "updated max_attempts")
		top, err := f.c.Admin.GetTopic(ctxT(t), &sundialv1.GetTopicRequest{Name: "jobs"})
		if err != nil || top.GetMaxAttempts() != 7 {
			t.Fatalf("GetTopic() = %v, %v, want max_attempts 7", top, err)
		}
		resp, body = f.post(t, "/ui/topics/jobs/settings", url.Values{"max_attempts": {"-1"}})
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "max_attempts") || !strings.Contains(body, "InvalidArgument") {
			t.Fatalf("max_attempts -1 = %d, want 400 from the API naming max_attempts: %s", resp.StatusCode, body)
		}
	})
	t.Run("redrive and purge", func(t *testing.T) {
		resp, body := f.post(t, "/ui/topics/jobs/redrive", url.Values{})
		redirected(t, resp, body, "redrove 0 dead letters")
		resp, body = f.post(t, "/ui/topics/jobs/purge", url.Values{"group": {"billing"}})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Purge the pending messages?") {
			t.Fatalf("purge without confirm = %d, want the confirmation page", resp.StatusCode)
		}
		resp, body = f.post(t, "/ui/topics/jobs/purge", url.Values{"group": {"billing"}, "confirm": {"yes"}})
		redirected(t, resp, body, "of group billing")
		g, err := f.c.Admin.ListGroups(ctxT(t), &sundialv1.ListGroupsRequest{Topic: "jobs"})
		if err != nil {
			t.Fatal(err)
		}
		for _, gr := range g.GetGroups() {
			s := gr.GetStats()
			if n := s.GetScheduled() + s.GetReady(); (gr.GetName() == "billing") != (n == 0) {
				t.Errorf("after purging billing, group %s holds %d messages", gr.GetName(), n)
			}
		}
	})
}

// TestBackups runs the cluster page's Backups section over HTTP against a
// real cluster: what it shows, and what its forms do, checked through
// gRPC.
func TestBackups(t *testing.T) {
	f := newFixture(t)
	dest := "file://" + t.TempDir()
	runs := func(t *testing.T) []*sundialv1.BackupRun {
		t.Helper()
		resp, err := f.c.Backups.ListBackupRuns(ctxT(t), &sundialv1.ListBackupRunsRequest{})
		if err != nil {
			t.Fatalf("ListBackupRuns() error = %v", err)
		}
		return resp.GetRuns()
	}
	schedule := func(t *testing.T) *sundialv1.BackupSchedule {
		t.Helper()
		sc, err := f.c.Backups.GetBackupSchedule(ctxT(t), &sundialv1.GetBackupScheduleRequest{})
		if err != nil {
			t.Fatalf("GetBackupSchedule() error = %v", err)
		}
		return sc
	}
	// done answers the notice of an action that redirected to the cluster
	// page, checking it contains notice.
	done := func(t *testing.T, resp answer, body, notice string) string {
		t.Helper()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/ui/cluster?") {
			t.Fatalf("status %d Location %q, want 303 to the cluster page: %s", resp.StatusCode, loc, body)
		}
		u, _ := url.Parse(loc)
		got := u.Query().Get("notice")
		if !strings.Contains(got, notice) {
			t.Fatalf("notice %q, want it to contain %q", got, notice)
		}
		return got
	}
	// refused checks an answer 400 showing InvalidArgument on field in the
	// whole cluster page.
	refused := func(t *testing.T, resp answer, body, field string) {
		t.Helper()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, `id="error"`) || !strings.Contains(body, "InvalidArgument") || !strings.Contains(body, "<code>"+field+"</code>") {
			t.Fatalf("status %d, want 400 showing InvalidArgument on %s: %s", resp.StatusCode, field, body)
		}
		if !strings.Contains(body, `id="nodes"`) || !strings.Contains(body, `id="backup-now"`) {
			t.Errorf("the error page is not the whole cluster page: %s", body)
		}
	}
	// rowOf is run id's row of the runs table, "" if none.
	rowOf := func(body, id string) string {
		i := strings.Index(body, `<tr data-id="`+id+`">`)
		if i < 0 {
			return ""
		}
		return body[i : i+strings.Index(body[i:], "</tr>")]
	}
	waitDone := func(t *testing.T, id string) {
		t.Helper()
		integration.Eventually(t, 60*time.Second, func() error {
			_, body := f.get(t, "/ui/cluster")
			if row := rowOf(body, id); !strings.Contains(row, `<td class="status-DONE">DONE</td>`) || !strings.Contains(row, `<td class="num shards">2/2</td>`) {
				return fmt.Errorf("run %s is not shown done with its 2 shards: %q", id, row)
			}
			return nil
		})
	}

	t.Run("nothing yet", func(t *testing.T) {
		code, body := f.get(t, "/ui/cluster")
		if code != http.StatusOK {
			t.Fatalf("GET /ui/cluster = %d: %s", code, body)
		}
		i, j := strings.Index(body, `id="live"`), strings.Index(body, `id="backup-now"`)
		if i < 0 || j < i {
			t.Fatalf("cluster page lacks its live part or the Back up now form after it: %s", body)
		}
		live := body[i:j]
		for _, want := range []string{`<h2 id="backups">`, "No backup schedule", "No backup has run yet"} {
			if !strings.Contains(live, want) {
				t.Errorf("the live part lacks %q: %s", want, live)
			}
		}
		for _, want := range []string{`id="set-backup-schedule"`, "shardctl backup restore --src"} {
			if !strings.Contains(body, want) {
				t.Errorf("cluster page lacks %q", want)
			}
		}
		if strings.Contains(body, `id="clear-backup-schedule"`) {
			t.Errorf("clearing is offered with no schedule set")
		}
	})
	t.Run("back up now refuses bad input", func(t *testing.T) {
		resp, body := f.post(t, "/ui/cluster/backup-now", url.Values{"dest": {""}})
		refused(t, resp, body, "dest")
		resp, body = f.post(t, "/ui/cluster/backup-now", url.Values{"dest": {"backups/daily"}, "incremental": {"yes"}})
		refused(t, resp, body, "dest")
		// The form keeps what was posted, to be corrected.
		if !strings.Contains(body, `name="dest" value="backups/daily"`) || !strings.Contains(body, `value="yes" checked>`) {
			t.Errorf("the form does not hold the values posted: %s", body)
		}
		if got := runs(t); len(got) != 0 {
			t.Fatalf("refused backups started runs: %v", got)
		}
	})
	var full string
	t.Run("back up now", func(t *testing.T) {
		resp, body := f.post(t, "/ui/cluster/backup-now", url.Values{"dest": {dest}})
		notice := done(t, resp, body, "started full backup ")
		got := runs(t)
		if len(got) != 1 || got[0].GetKind() != "full" || got[0].GetDest() != dest || !strings.Contains(notice, got[0].GetId()) {
			t.Fatalf("after Back up now: runs %v, notice %q; want one full run to %s, named", got, notice, dest)
		}
		full = got[0].GetId()
		waitDone(t, full)

		resp, body = f.post(t, "/ui/cluster/backup-now", url.Values{"dest": {dest}, "incremental": {"yes"}})
		done(t, resp, body, "started incremental backup ")
		got = runs(t)
		if len(got) != 2 || got[0].GetKind() != "incremental" || got[0].GetParent() != full {
			t.Fatalf("after an incremental Back up now: runs %v, want an incremental on %s first", got, full)
		}
		waitDone(t, got[0].GetId())
		_, page := f.get(t, "/ui/cluster")
		if row := rowOf(page, got[0].GetId()); !strings.Contains(row, "incremental") || !strings.Contains(row, "on <code>"+full+"</code>") {
			t.Errorf("the incremental run's row does not say what it builds on: %s", row)
		}
		// Back up now offers the destination of the newest run.
		if !strings.Contains(page, `name="dest" value="`+dest+`"`) {
			t.Errorf("Back up now does not offer %s", dest)
		}
	})
	t.Run("cross-origin post refused", func(t *testing.T) {
		resp, body := f.post(t, "/ui/cluster/backup-now", url.Values{"dest": {dest}}, "Sec-Fetch-Site", "cross-site")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "cross-origin") {
			t.Fatalf("cross-site Back up now = %d, want 403: %s", resp.StatusCode, body)
		}
		resp, _ = f.post(t, "/ui/cluster/backup-schedule", url.Values{"dest": {dest}, "every": {"1h"}}, "Sec-Fetch-Site", "", "Origin", "http://evil.example")
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("schedule set with a foreign Origin = %d, want 403", resp.StatusCode)
		}
		if n := len(runs(t)); n != 2 {
			t.Errorf("refused posts left %d runs, want 2", n)
		}
		if sc := schedule(t); sc.GetEveryMs() != 0 {
			t.Errorf("a refused post set the schedule: %v", sc)
		}
	})
	t.Run("schedule refuses bad input", func(t *testing.T) {
		resp, body := f.post(t, "/ui/cluster/backup-schedule", url.Values{"dest": {dest}, "every": {"abc"}})
		refused(t, resp, body, "every")
		if !strings.Contains(body, "&#34;abc&#34;") || !strings.Contains(body, `name="every" value="abc"`) {
			t.Errorf("the error does not quote abc, or the form lost it: %s", body)
		}
		resp, body = f.post(t, "/ui/cluster/backup-schedule", url.Values{"dest": {dest}})
		refused(t, resp, body, "every") // an empty every would clear the schedule
		resp, body = f.post(t, "/ui/cluster/backup-schedule", url.Values{"every": {"1h"}})
		refused(t, resp, body, "schedule.dest")
		// A keep under full every: keep asks first, then the API refuses.
		form := url.Values{"dest": {dest}, "every": {"1h"}, "full_every": {"24h"}, "keep": {"12h"}}
		resp, body = f.post(t, "/ui/cluster/backup-schedule", form)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "will be deleted") {
			t.Fatalf("schedule with keep = %d, want the confirmation page: %s", resp.StatusCode, body)
		}
		form.Set("confirm", "yes")
		resp, body = f.post(t, "/ui/cluster/backup-schedule", form)
		refused(t, resp, body, "schedule.keep_ms")
		if sc := schedule(t); sc.GetEveryMs() != 0 {
			t.Fatalf("refused schedules set one: %v", sc)
		}
	})
	t.Run("schedule set and cleared", func(t *testing.T) {
		resp, body := f.post(t, "/ui/cluster/backup-schedule", url.Values{"dest": {dest}, "every": {"1h"}, "full_every": {"24h"}})
		done(t, resp, body, "backup schedule set: to "+dest+" every 1h")
		if sc := schedule(t); sc.GetDest() != dest || sc.GetEveryMs() != 3_600_000 || sc.GetFullEveryMs() != 86_400_000 || sc.GetKeepMs() != 0 {
			t.Fatalf("GetBackupSchedule() = %v, want %s every 1h, full every 24h, keep all", sc, dest)
		}
		// The first scheduled backup starts at once; the page names it as
		// the schedule's last run.
		integration.Eventually(t, 60*time.Second, func() error {
			_, body := f.get(t, "/ui/cluster")
			if !strings.Contains(body, `<td><code>`+dest+`</code></td><td>1h</td><td>1d</td><td>all</td>`) {
				return fmt.Errorf("the schedule is not shown: %s", body)
			}
			last := schedule(t).GetLastRunId()
			if last == "" || !strings.Contains(rowOf(body, last), "<small>scheduled</small>") || !strings.Contains(body, "<code>"+last+"</code> <span class=\"status-") {
				return fmt.Errorf("the scheduled run %q is not shown", last)
			}
			return nil
		})

		form := url.Values{"dest": {dest}, "every": {"1h"}, "full_every": {"24h"}, "keep": {"7d"}}
		resp, body = f.post(t, "/ui/cluster/backup-schedule", form)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "finished more than 7d ago will be deleted") {
			t.Fatalf("schedule with keep 7d = %d, want the confirmation page: %s", resp.StatusCode, body)
		}
		if sc := schedule(t); sc.GetKeepMs() != 0 {
			t.Fatalf("keep set before confirmation: %v", sc)
		}
		form.Set("confirm", "yes")
		resp, body = f.post(t, "/ui/cluster/backup-schedule", form)
		done(t, resp, body, "backup schedule set")
		if sc := schedule(t); sc.GetKeepMs() != 7*24*3_600_000 {
			t.Fatalf("GetBackupSchedule() = %v, want keep 7d", sc)
		}
		if _, body = f.get(t, "/ui/cluster"); !strings.Contains(body, "<td>1d</td><td>7d</td>") || !strings.Contains(body, `name="keep" value="7d"`) {
			t.Errorf("the page does not show keep 7d: %s", body)
		}

		resp, body = f.post(t, "/ui/cluster/clear-backup-schedule", url.Values{})
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, "Clear the backup schedule?") || !strings.Contains(body, `href="/ui/cluster"`) {
			t.Fatalf("clear = %d, want the confirmation page going back to the cluster: %s", resp.StatusCode, body)
		}
		if sc := schedule(t); sc.GetEveryMs() == 0 {
			t.Fatalf("schedule cleared before confirmation")
		}
		resp, body = f.post(t, "/ui/cluster/clear-backup-schedule", url.Values{"confirm": {"yes"}})
		done(t, resp, body, "backup schedule cleared")
		if sc := schedule(t); sc.GetEveryMs() != 0 {
			t.Fatalf("GetBackupSchedule() after clear = %v, want none", sc)
		}
		if _, body = f.get(t, "/ui/cluster"); !strings.Contains(body, "No backup schedule") {
			t.Errorf("the page still shows a schedule after clear")
		}
	})
}
