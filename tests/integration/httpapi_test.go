package integration

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// httpClient talks JSON to the proxy's HTTP port.
type httpClient struct {
	t    *testing.T
	base string
	hc   *http.Client
	// hits are the "METHOD path" of the requests do sent that reached an
	// RPC (answers other than 404, 405 and 415).
	hits []string
}

func newHTTPClient(t *testing.T, c *Cluster) *httpClient {
	return &httpClient{t: t, base: "http://" + c.Proxy.HTTPAddr(), hc: &http.Client{Timeout: 30 * time.Second}}
}

// do sends body (nil, a string or a value to marshal) and answers the HTTP
// status and the decoded JSON object.
func (h *httpClient) do(method, path string, body any) (int, map[string]any) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			h.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, h.base+path, rd)
	if err != nil {
		h.t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.hc.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusUnsupportedMediaType: // maybe no route
	default:
		h.hits = append(h.hits, method+" "+req.URL.Path)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		h.t.Fatalf("%s %s = %d %q: not a JSON object: %v", method, path, resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}

// ok is do that wants 200.
func (h *httpClient) ok(method, path string, body any) map[string]any {
	h.t.Helper()
	code, out := h.do(method, path, body)
	if code != http.StatusOK {
		h.t.Fatalf("%s %s = %d %v, want 200", method, path, code, out)
	}
	return out
}

func list(v any) []any { l, _ := v.([]any); return l }

func obj(v any) map[string]any { m, _ := v.(map[string]any); return m }

// int64Field reads a protojson int64 (a JSON string).
func int64Field(t *testing.T, m map[string]any, name string) int64 {
	t.Helper()
	s, _ := m[name].(string)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("field %s = %v in %v: not an int64", name, m[name], m)
	}
	return n
}

// TestHTTPAPI drives the public API over HTTP/JSON through a real cluster:
// the routes of the google.api.http annotations, transcoded in-process to
// the proxy's gRPC handlers.
func TestHTTPAPI(t *testing.T) {
	c := New(t, Config{Brokers: 1, Shards: 2})
	h := newHTTPClient(t, c)

	t.Run("DelayedPublishReceiveAck", func(t *testing.T) {
		h.t = t
		pub := h.ok("POST", "/v1/topics/http-delay/messages", map[string]any{
			"messages": []any{map[string]any{"text": "hello", "delayMs": "1000"}},
		})
		res := obj(list(pub["results"])[0])
		if res["error"] != nil {
			t.Fatalf("publish result = %v, want no error", res)
		}
		id, due := res["messageId"].(string), int64Field(t, res, "dueAtUnixMs")
		receive := func(waitMs int) []any {
			return list(h.ok("POST", "/v1/topics/http-delay/groups/default/messages:receive",
				map[string]any{"maxMessages": 10, "waitMs": strconv.Itoa(waitMs)})["deliveries"])
		}
		// An answer that arrives before the due time holds nothing.
		early := receive(0)
		if answeredAt := time.Now().UnixMilli(); answeredAt < due && len(early) != 0 {
			t.Fatalf("receive answered at %d, before due %d, with %v, want nothing", answeredAt, due, early)
		}
		var got map[string]any
		Eventually(t, 20*time.Second, func() error {
			if ds := receive(1000); len(ds) > 0 {
				got = obj(ds[0])
				return nil
			}
			return fmt.Errorf("nothing delivered yet")
		})
		if now := time.Now().UnixMilli(); now < due {
			t.Fatalf("delivered at %d, before its due time %d", now, due)
		}
		payload, _ := base64.StdEncoding.DecodeString(got["payload"].(string))
		if got["messageId"] != id || string(payload) != "hello" {
			t.Fatalf("delivery = %v, want id %s payload hello (base64 aGVsbG8=)", got, id)
		}
		ack := h.ok("POST", "/v1/acks", map[string]any{"receipts": []any{got["receipt"]}})
		if r := obj(list(ack["results"])[0]); r["error"] != nil {
			t.Fatalf("ack = %v, want no error", ack)
		}
		if ds := receive(0); len(ds) != 0 {
			t.Fatalf("receive after ack = %v, want nothing", ds)
		}
	})

	t.Run("ExtendNackRedeliver", func(t *testing.T) {
		h.t = t
		h.ok("POST", "/v1/topics/http-nack/messages", map[string]any{"messages": []any{map[string]any{"text": "again"}}})
		receive := func() map[string]any {
			var got map[string]any
			Eventually(t, 20*time.Second, func() error {
				ds := list(h.ok("POST", "/v1/topics/http-nack/groups/default/messages:receive", map[string]any{"waitMs": 1000})["deliveries"])
				if len(ds) == 0 {
					return fmt.Errorf("nothing delivered yet")
				}
				got = obj(ds[0])
				return nil
			})
			return got
		}
		first := receive()
		ext := obj(list(h.ok("POST", "/v1/extends", map[string]any{"receipts": []any{first["receipt"]}, "extendMs": 60000})["results"])[0])
		if ext["error"] != nil || int64Field(t, ext, "leaseDeadlineUnixMs") <= int64Field(t, first, "leaseDeadlineUnixMs") {
			t.Fatalf("extend = %v, want a later lease deadline than %v", ext, first["leaseDeadlineUnixMs"])
		}
		nack := obj(list(h.ok("POST", "/v1/nacks", map[string]any{"receipts": []any{first["receipt"]}, "delayMs": 100})["results"])[0])
		if nack["error"] != nil {
			t.Fatalf("nack = %v, want no error", nack)
		}
		second := receive()
		if second["messageId"] != first["messageId"] || second["attempt"] != float64(2) {
			t.Fatalf("redelivery = %v, want %v attempt 2", second, first["messageId"])
		}
		// The first attempt's receipt no longer settles anything.
		stale := obj(list(h.ok("POST", "/v1/acks", map[string]any{"receipts": []any{first["receipt"]}})["results"])[0])
		if stale["error"] == nil {
			t.Fatalf("ack with the first attempt's receipt = %v, want an error", stale)
		}
		h.ok("POST", "/v1/acks", map[string]any{"receipts": []any{second["receipt"]}})
	})

	t.Run("CancelAndReschedule", func(t *testing.T) {
		h.t = t
		pub := h.ok("POST", "/v1/topics/http-change/messages", map[string]any{"messages": []any{
			map[string]any{"text": "by-id", "delayMs": "60000"},
			map[string]any{"text": "by-key", "delayMs": "60000", "key": "k-cancel"},
			map[string]any{"text": "later", "delayMs": "60000"},
			map[string]any{"text": "later-key", "delayMs": "60000", "key": "k/resched"},
		}})
		results := list(pub["results"])
		idOf := func(i int) string { return obj(results[i])["messageId"].(string) }
		outcome := func(m map[string]any) string { s, _ := m["outcome"].(string); return s }

		if got := h.ok("DELETE", "/v1/topics/http-change/messages/"+idOf(0), nil); outcome(got) != "CHANGE_OUTCOME_DONE" || got["messageId"] != idOf(0) {
			t.Fatalf("cancel by id = %v, want DONE for %s", got, idOf(0))
		}
		if got := h.ok("DELETE", "/v1/topics/http-change/messages/"+idOf(0), nil); outcome(got) != "CHANGE_OUTCOME_DONE" {
			t.Fatalf("retried cancel by id = %v, want the same answer DONE", got)
		}
		for _, attempt := range []string{"cancel by key", "retried cancel by key"} {
			if got := h.ok("DELETE", "/v1/topics/http-change/messages?key=k-cancel&requestId=http-cancel-1", nil); outcome(got) != "CHANGE_OUTCOME_DONE" || got["messageId"] != idOf(1) {
				t.Fatalf("%s = %v, want DONE for %s", attempt, got, idOf(1))
			}
		}
		before := time.Now().UnixMilli()
		got := h.ok("POST", "/v1/topics/http-change/messages/"+idOf(2)+":reschedule", map[string]any{"delayMs": "120000"})
		if outcome(got) != "CHANGE_OUTCOME_DONE" || int64Field(t, got, "dueAtUnixMs") < before+120000 {
			t.Fatalf("reschedule by id = %v, want DONE due at least %d", got, before+120000)
		}
		rescheduleByKey := map[string]any{"delayMs": "180000", "requestId": "http-resched-1"}
		got = h.ok("POST", "/v1/topics/http-change/messages:reschedule?key=k%2Fresched", rescheduleByKey)
		if outcome(got) != "CHANGE_OUTCOME_DONE" || got["messageId"] != idOf(3) || int64Field(t, got, "dueAtUnixMs") < before+180000 {
			t.Fatalf("reschedule by key = %v, want DONE for %s due at least %d", got, idOf(3), before+180000)
		}
		if again := h.ok("POST", "/v1/topics/http-change/messages:reschedule?key=k%2Fresched", rescheduleByKey); int64Field(t, again, "dueAtUnixMs") != int64Field(t, got, "dueAtUnixMs") {
			t.Fatalf("retried reschedule by key = %v, want the first answer %v", again, got)
		}
		info := h.ok("GET", "/v1/topics/http-change/messages/"+idOf(2), nil)
		if int64Field(t, info, "dueAtUnixMs") < before+120000 {
			t.Fatalf("message after reschedule = %v, want due at least %d", info, before+120000)
		}
		if got := h.ok("DELETE", "/v1/topics/http-change/messages?key=no-such-key", nil); outcome(got) != "CHANGE_OUTCOME_NOT_FOUND" {
			t.Fatalf("cancel of a missing key = %v, want NOT_FOUND", got)
		}
	})

	t.Run("BadInput", func(t *testing.T) {
		h.t = t
		const publish = "/v1/topics/http-bad/messages"
		for _, tc := range []struct {
			name, method, path, body string
			wantField                string // a field violation naming this field, if set
			wantInMessage            string
		}{
			{name: "bad JSON", method: "POST", path: publish, body: `{"messages":[`, wantInMessage: "unexpected"},
			{name: "unknown field", method: "POST", path: publish, body: `{"messages":[{"text":"x","colour":"red"}]}`, wantInMessage: "colour"},
			{name: "wrong type", method: "POST", path: publish, body: `{"messages":[{"text":"x","delayMs":"soon"}]}`, wantInMessage: "delayMs"},
			{name: "wrong type for a path field", method: "POST", path: "/v1/cluster/shards/abc:transferLeader", body: `{}`, wantInMessage: "shard_id"},
			{name: "unknown query parameter", method: "GET", path: "/v1/topics?colour=red", wantInMessage: "colour"},
			{name: "bad value", method: "POST", path: publish, body: `{"messages":[{"text":"x","delayMs":"-5"}]}`, wantField: "messages[0].delay_ms"},
			{name: "payload and text", method: "POST", path: publish, body: `{"messages":[{"text":"x","payload":"eA=="}]}`, wantField: "messages[0].text"},
			{name: "another topic in a message", method: "POST", path: publish, body: `{"messages":[{"text":"x","topic":"other"}]}`, wantField: "messages[0].topic"},
			{name: "bad topic name", method: "POST", path: "/v1/topics", body: `{"name":"has space"}`, wantField: "topic.name"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				h.t = t
				var body any
				if tc.body != "" {
					body = tc.body
				}
				code, out := h.do(tc.method, tc.path, body)
				if code != http.StatusBadRequest || out["code"] != float64(3) {
					t.Fatalf("%s %s %s = %d %v, want 400 with code 3 (InvalidArgument)", tc.method, tc.path, tc.body, code, out)
				}
				msg, _ := out["message"].(string)
				if !strings.Contains(msg, tc.wantInMessage) {
					t.Errorf("message = %q, want it to mention %q", msg, tc.wantInMessage)
				}
				if tc.wantField == "" {
					return
				}
				var fields []string
				for _, d := range list(out["details"]) {
					if obj(d)["@type"] != "type.googleapis.com/google.rpc.BadRequest" {
						continue
					}
					for _, v := range list(obj(d)["fieldViolations"]) {
						fields = append(fields, fmt.Sprint(obj(v)["field"]))
					}
				}
				if !contains(fields, tc.wantField) {
					t.Fatalf("field violations = %v (details %v), want one for %s", fields, out["details"], tc.wantField)
				}
			})
		}
	})

	t.Run("NotFoundAndTooLarge", func(t *testing.T) {
		h.t = t
		for _, path := range []string{"/v1/topics/no-such-topic", "/v1/topics/no-such-topic/groups"} {
			if code, out := h.do("GET", path, nil); code != http.StatusNotFound || out["code"] != float64(5) {
				t.Errorf("GET %s = %d %v, want 404 with code 5 (NotFound)", path, code, out)
			}
		}
		big := `{"messages":[{"text":"` + strings.Repeat("x", 9<<20) + `"}]}`
		if code, out := h.do("POST", "/v1/topics/http-big/messages", big); code != http.StatusRequestEntityTooLarge || out["code"] != float64(8) {
			t.Errorf("POST of a 9 MiB body = %d %v, want 413 with code 8 (ResourceExhausted)", code, out)
		}
		if code, out := h.do("GET", "/v1/no-such-route", nil); code != http.StatusNotFound {
			t.Errorf("GET /v1/no-such-route = %d %v, want 404", code, out)
		}
	})

	t.Run("CurlDefaults", func(t *testing.T) {
		h.t = t
		// curl -d sends application/x-www-form-urlencoded, what a cross-site
		// form sends too: refused 415, nothing published (docs/security.md).
		req, err := http.NewRequest(http.MethodPost, h.base+"/v1/topics/http-curl/messages", strings.NewReader(`{"messages":[{"text":"x"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		resp, err := h.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnsupportedMediaType || bytes.Contains(raw, []byte(`"messageId"`)) {
			t.Fatalf("publish with curl's form content type = %d %s, want 415", resp.StatusCode, raw)
		}
		// The transcoder's own refusals answer the JSON error shape too.
		if code, out := h.do("PUT", "/v1/topics", nil); code != http.StatusMethodNotAllowed || out["code"] != float64(12) {
			t.Fatalf("PUT /v1/topics = %d %v, want 405 with code 12 (Unimplemented)", code, out)
		}
	})

	t.Run("TopicsAndCluster", func(t *testing.T) {
		h.t = t
		created := h.ok("POST", "/v1/topics", map[string]any{"name": "http-admin", "partitions": 2})
		if created["name"] != "http-admin" || created["partitions"] != float64(2) {
			t.Fatalf("create topic = %v", created)
		}
		if code, out := h.do("POST", "/v1/topics", map[string]any{"name": "http-admin"}); code != http.StatusConflict || out["code"] != float64(6) {
			t.Fatalf("create existing topic = %d %v, want 409 with code 6 (AlreadyExists)", code, out)
		}
		h.ok("POST", "/v1/topics?if_not_exists=true", map[string]any{"name": "http-admin"})
		h.ok("PATCH", "/v1/topics/http-admin?update_mask=visibility_timeout_ms", map[string]any{"visibilityTimeoutMs": "45000"})
		if got := h.ok("GET", "/v1/topics/http-admin", nil); got["visibilityTimeoutMs"] != "45000" {
			t.Fatalf("topic after PATCH = %v, want visibilityTimeoutMs 45000", got)
		}
		h.ok("POST", "/v1/topics/http-admin/groups", map[string]any{"group": "audit"})
		groups := h.ok("GET", "/v1/topics/http-admin/groups", nil)
		if len(list(groups["groups"])) != 2 {
			t.Fatalf("groups = %v, want default and audit", groups)
		}
		h.ok("POST", "/v1/topics/http-admin/messages", map[string]any{"messages": []any{map[string]any{"text": "x", "delayMs": "600000"}}})
		if got := list(h.ok("GET", "/v1/topics/http-admin/messages?page_size=10", nil)["messages"]); len(got) != 1 {
			t.Fatalf("list messages = %v, want 1", got)
		}
		if got := list(h.ok("GET", "/v1/topics/http-admin/histogram?bucket=HISTOGRAM_BUCKET_HOUR", nil)["counts"]); len(got) == 0 {
			t.Fatalf("histogram has no buckets")
		}
		if got := h.ok("POST", "/v1/topics/http-admin:purge", map[string]any{}); got["purged"] != "2" {
			t.Fatalf("purge = %v, want 2 copies purged (2 groups)", got)
		}
		h.ok("DELETE", "/v1/topics/http-admin/groups/audit", nil)
		info := h.ok("GET", "/v1/cluster", nil)
		if len(list(info["nodes"])) != 1 || len(list(info["shards"])) != 2 {
			t.Fatalf("cluster = %v, want 1 node and 2 shards", info)
		}
	})

	t.Run("MoreAdminAndCluster", func(t *testing.T) {
		h.t = t
		h.ok("POST", "/v1/topics", map[string]any{"name": "http-gone"})
		if got := list(h.ok("GET", "/v1/topics?prefix=http-gone", nil)["topics"]); len(got) != 1 {
			t.Fatalf("list topics with prefix http-gone = %v, want 1", got)
		}
		if got := h.ok("POST", "/v1/topics/http-gone/dlq:redrive", map[string]any{}); got["moved"] != "0" {
			t.Fatalf("redrive of an empty dead-letter topic = %v, want 0 moved", got)
		}
		h.ok("DELETE", "/v1/topics/http-gone", nil)
		if code, _ := h.do("GET", "/v1/topics/http-gone", nil); code != http.StatusNotFound {
			t.Fatalf("GET a deleted topic = %d, want 404", code)
		}
		shards := list(h.ok("GET", "/v1/cluster/shards", nil)["shards"])
		if len(shards) != 2 {
			t.Fatalf("shards = %v, want 2", shards)
		}
		h.ok("GET", "/v1/cluster/operations", nil)
		// No node 99 and no operation 99999 (NotFound from the RPC, code
		// 5); no node 0, no shards to add and no operation 0 (the RPC's
		// validation: 400, code 3).
		for _, r := range []struct {
			method, path string
			body         any
			status       int
			code         float64
		}{
			{"POST", "/v1/cluster/nodes/99:drain", map[string]any{}, http.StatusNotFound, 5},
			{"DELETE", "/v1/cluster/nodes/99?force=true", nil, http.StatusNotFound, 5},
			{"POST", "/v1/cluster/nodes/0:drain", map[string]any{}, http.StatusBadRequest, 3},
			{"DELETE", "/v1/cluster/nodes/0", nil, http.StatusBadRequest, 3},
			{"POST", "/v1/cluster/shards:add", map[string]any{"count": 0}, http.StatusBadRequest, 3},
			{"POST", "/v1/cluster/operations/99999:cancel", map[string]any{}, http.StatusNotFound, 5},
			{"POST", "/v1/cluster/operations/0:cancel", map[string]any{}, http.StatusBadRequest, 3},
		} {
			if code, out := h.do(r.method, r.path, r.body); code != r.status || out["code"] != r.code {
				t.Fatalf("%s %s = %d %v, want %d with code %v", r.method, r.path, code, out, r.status, r.code)
			}
		}
		h.ok("POST", "/v1/cluster:rebalance", map[string]any{"dryRun": true})
		// Join tokens: the secret is answered once, the list never shows it.
		made := h.ok("POST", "/v1/cluster/joinTokens", map[string]any{"expiresInMs": "60000", "uses": 2})
		tok := obj(made["token"])
		if secret, _ := made["secret"].(string); !strings.HasPrefix(secret, "sdjt."+tok["id"].(string)+".") {
			t.Fatalf("create join token = %v, want a secret sdjt.<id>.<secret>", made)
		}
		listed := list(h.ok("GET", "/v1/cluster/joinTokens", nil)["tokens"])
		if len(listed) != 1 || obj(listed[0])["id"] != tok["id"] || obj(listed[0])["secret"] != nil {
			t.Fatalf("list join tokens = %v, want the one made, without a secret", listed)
		}
		h.ok("DELETE", "/v1/cluster/joinTokens/"+tok["id"].(string), nil)
		if code, out := h.do("DELETE", "/v1/cluster/joinTokens/"+tok["id"].(string), nil); code != http.StatusNotFound || out["code"] != float64(5) {
			t.Fatalf("revoke a revoked join token = %d %v, want 404 with code 5", code, out)
		}
		if code, out := h.do("POST", "/v1/cluster/joinTokens", map[string]any{"uses": 1001}); code != http.StatusBadRequest || out["code"] != float64(3) {
			t.Fatalf("create a join token with 1001 uses = %d %v, want 400 with code 3", code, out)
		}
		// One broker: the shard has no other replica to lead.
		code, out := h.do("POST", "/v1/cluster/shards/"+obj(shards[0])["shardId"].(string)+":transferLeader", map[string]any{})
		if code != http.StatusBadRequest || out["code"] != float64(9) {
			t.Fatalf("transfer leader on one broker = %d %v, want 400 with code 9 (FailedPrecondition)", code, out)
		}
	})

	t.Run("EveryRouteExercised", func(t *testing.T) {
		for _, m := range publicUnaryMethods() {
			rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule)
			for _, r := range append([]*annotations.HttpRule{rule}, rule.GetAdditionalBindings()...) {
				method, template := ruleRoute(r)
				if !routeHit(h.hits, method, template) {
					t.Errorf("no request of this test reached %s %s (%s)", method, template, m.FullName())
				}
			}
		}
	})

	t.Run("OpenAPI", func(t *testing.T) {
		resp, err := http.Get(h.base + "/openapi.json")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var doc struct {
			Swagger string                                `json:"swagger"`
			Paths   map[string]map[string]json.RawMessage `json:"paths"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != http.StatusOK || doc.Swagger != "2.0" {
			t.Fatalf("GET /openapi.json = %d, swagger %q, %v; want 200 and an OpenAPI 2.0 document", resp.StatusCode, doc.Swagger, err)
		}
		ops := map[string]bool{}
		for _, methods := range doc.Paths {
			for _, raw := range methods {
				var op struct {
					OperationID string `json:"operationId"`
				}
				_ = json.Unmarshal(raw, &op)
				ops[strings.TrimRight(op.OperationID, "0123456789")] = true
			}
		}
		unary := publicUnaryMethods()
		if len(unary) < 20 {
			t.Fatalf("found %d unary methods in the descriptors, want the whole public API", len(unary))
		}
		for _, m := range unary {
			svc := string(m.Parent().Name())
			if rule, _ := proto.GetExtension(m.Options(), annotations.E_Http).(*annotations.HttpRule); rule == nil {
				t.Errorf("%s has no google.api.http annotation", m.FullName())
			}
			if !ops[svc+"_"+string(m.Name())] {
				t.Errorf("/openapi.json has no path for %s (operationId %s_%s)", m.FullName(), svc, m.Name())
			}
		}
	})

	t.Run("Docs", func(t *testing.T) {
		for path, want := range map[string]string{"/docs": "swagger-ui", "/docs/swagger-ui-bundle.js": "SwaggerUIBundle", "/docs/swagger-ui.css": ".swagger-ui"} {
			resp, err := http.Get(h.base + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(want)) {
				t.Errorf("GET %s = %d (%d bytes), want 200 holding %q", path, resp.StatusCode, len(body), want)
			}
		}
	})
}

// internalRPCs are the unary RPCs of the sundial.v1 services the HTTP API
// leaves out on purpose.
var internalRPCs = map[protoreflect.FullName]string{
	"sundial.v1.Cluster.JoinCluster": "brokers call it on each other when one joins",
}

// publicUnaryMethods lists every unary RPC of the sundial.v1 services, read
// from the compiled descriptors.
func publicUnaryMethods() []protoreflect.MethodDescriptor {
	var out []protoreflect.MethodDescriptor
	services := sundialv1.File_sundial_v1_sundial_proto.Services()
	for i := range services.Len() {
		methods := services.Get(i).Methods()
		for j := range methods.Len() {
			m := methods.Get(j)
			if m.IsStreamingClient() || m.IsStreamingServer() || internalRPCs[m.FullName()] != "" {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}

// ruleRoute answers the HTTP method and path template of an HttpRule.
func ruleRoute(r *annotations.HttpRule) (string, string) {
	switch p := r.GetPattern().(type) {
	case *annotations.HttpRule_Get:
		return http.MethodGet, p.Get
	case *annotations.HttpRule_Post:
		return http.MethodPost, p.Post
	case *annotations.HttpRule_Put:
		return http.MethodPut, p.Put
	case *annotations.HttpRule_Patch:
		return http.MethodPatch, p.Patch
	case *annotations.HttpRule_Delete:
		return http.MethodDelete, p.Delete
	}
	return "", ""
}

// routeHit reports whether a hit ("METHOD path") matches the template, whose
// {variables} each match one path segment without ':'.
func routeHit(hits []string, method, template string) bool {
	re := regexp.MustCompile(`\\\{.*?\\\}`)
	pattern := "^" + method + " " + re.ReplaceAllString(regexp.QuoteMeta(template), `[^/:]+`) + "$"
	match := regexp.MustCompile(pattern)
	for _, hit := range hits {
		if match.MatchString(hit) {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
