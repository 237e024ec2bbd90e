package meta

import (
	"encoding/json"
	"slices"
	"testing"
)

// A join that needs a token is admitted only with a stored token whose
// secret matches, that has not expired and has a use left; the refusal is
// decided before anything about the cluster, registers nothing and spends
// nothing. An admitted join spends a use in its own entry, so a second
// join cannot spend a single-use token; a join retried by the data dir the
// token admitted is answered again. Without Required a join without a
// token is admitted as before tokens (old log entries apply unchanged).
func TestJoinTokens(t *testing.T) {
	const nowMs = 1_000_000
	secret := "s3cret"
	token := &JoinToken{ID: "t1", Hash: HashSecret(secret), Uses: 1, ExpiresMs: nowMs + 60_000}
	joiner := func(inc string, use *JoinUse, atMs int64) *Command {
		return &Command{Op: OpJoinNode, NowMs: atMs, JoinUse: use, Node: &Node{RaftAddr: "r-" + inc, GRPCAddr: "g-" + inc, Incarnation: inc}}
	}
	good := &JoinUse{ID: "t1", Hash: HashSecret(secret), Required: true}
	cases := []struct {
		name   string
		token  *JoinToken // stored before the join
		first  *Command   // applied before c, when set
		c      *Command
		want   uint64
		reason string
	}{
		{name: "a good token admits", token: token, c: joiner("a", good, nowMs), want: ResultOK},
		{name: "no token when required", token: token, c: joiner("a", &JoinUse{Required: true}, nowMs), want: ResultDenied, reason: DeniedNoToken},
		{name: "a wrong secret", token: token, c: joiner("a", &JoinUse{ID: "t1", Hash: HashSecret("guess"), Required: true}, nowMs), want: ResultDenied, reason: DeniedBad},
		{name: "an unknown token", token: token, c: joiner("a", &JoinUse{ID: "t9", Hash: HashSecret(secret), Required: true}, nowMs), want: ResultDenied, reason: DeniedBad},
		{name: "an expired token", token: token, c: joiner("a", good, nowMs+60_000), want: ResultDenied, reason: DeniedExpired},
		{name: "a spent single-use token", token: token, first: joiner("a", good, nowMs), c: joiner("b", good, nowMs), want: ResultDenied, reason: DeniedSpent},
		{name: "a retried join of the admitted data dir", token: token, first: joiner("a", good, nowMs), c: joiner("a", good, nowMs+120_000), want: ResultNoop},
		{name: "a retry needs the token too", token: token, first: joiner("a", good, nowMs), c: joiner("a", &JoinUse{Required: true}, nowMs), want: ResultDenied, reason: DeniedNoToken},
		{name: "unlimited uses", token: &JoinToken{ID: "t1", Hash: HashSecret(secret)}, first: joiner("a", good, nowMs), c: joiner("b", good, nowMs), want: ResultOK},
		{name: "not required and none given", c: joiner("a", nil, nowMs), want: ResultOK},
		{name: "not required but a bad one given", token: token, c: joiner("a", &JoinUse{ID: "t1", Hash: HashSecret("guess")}, nowMs), want: ResultDenied, reason: DeniedBad},
		{name: "refused before the cluster id is checked", token: token, c: &Command{Op: OpJoinNode, NowMs: nowMs, ClusterID: "other", JoinUse: &JoinUse{Required: true}, Node: &Node{RaftAddr: "r", GRPCAddr: "g", Incarnation: "x"}}, want: ResultDenied, reason: DeniedNoToken},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := bootstrapped(t)
			apply(t, m, 5, &Command{Op: OpBootstrapShards, Count: 1, RF: 1, ClusterID: "c1"})
			if tc.token != nil {
				if r := apply(t, m, 6, &Command{Op: OpCreateJoinToken, NowMs: nowMs - 1, JoinToken: tc.token}); r.Value != ResultOK {
					t.Fatalf("create_join_token = %d, want ResultOK", r.Value)
				}
			}
			if tc.first != nil {
				if r := apply(t, m, 7, tc.first); r.Value != ResultOK {
					t.Fatalf("first join = %d, want ResultOK", r.Value)
				}
			}
			before := state(t, m)
			r := apply(t, m, 8, tc.c)
			if r.Value != tc.want {
				t.Fatalf("join_node(%+v) = %d (%s), want %d", tc.c.JoinUse, r.Value, r.Data, tc.want)
			}
			after := state(t, m)
			if tc.want != ResultDenied {
				return
			}
			var reason string
			if err := json.Unmarshal(r.Data, &reason); err != nil || reason != tc.reason {
				t.Errorf("refusal data %q, want reason %q", r.Data, tc.reason)
			}
			if len(after.Nodes) != len(before.Nodes) || after.Version != before.Version {
				t.Errorf("a refused join changed the nodes (%d -> %d) or version (%d -> %d)", len(before.Nodes), len(after.Nodes), before.Version, after.Version)
			}
			if tc.token != nil && !slices.Equal(after.JoinTokens["t1"].Nodes, before.JoinTokens["t1"].Nodes) {
				t.Errorf("a refused join spent the token: %v -> %v", before.JoinTokens["t1"].Nodes, after.JoinTokens["t1"].Nodes)
			}
		})
	}

	t.Run("create, spend and revoke", func(t *testing.T) {
		m := bootstrapped(t)
		apply(t, m, 5, &Command{Op: OpBootstrapShards, Count: 1, RF: 1, ClusterID: "c1"})
		apply(t, m, 6, &Command{Op: OpCreateJoinToken, NowMs: nowMs, JoinToken: &JoinToken{ID: "t1", Hash: HashSecret(secret), Uses: 2, Nodes: []NodeID{7}}})
		if r := apply(t, m, 7, &Command{Op: OpCreateJoinToken, NowMs: nowMs, JoinToken: &JoinToken{ID: "t1", Hash: HashSecret("x")}}); r.Value != ResultExists {
			t.Fatalf("create_join_token of a taken id = %d, want ResultExists", r.Value)
		}
		st := state(t, m).JoinTokens["t1"]
		if st.CreatedMs != nowMs || len(st.Nodes) != 0 || st.Hash != HashSecret(secret) {
			t.Fatalf("stored %+v, want created at %d, no nodes, the first hash", st, nowMs)
		}
		r := apply(t, m, 8, joiner("a", good, nowMs))
		var n Node
		if err := json.Unmarshal(r.Data, &n); err != nil || r.Value != ResultOK {
			t.Fatalf("join = %d %q", r.Value, r.Data)
		}
		if got := state(t, m).JoinTokens["t1"].Nodes; !slices.Equal(got, []NodeID{n.ID}) {
			t.Fatalf("token nodes = %v, want [%d]", got, n.ID)
		}
		if r := apply(t, m, 9, &Command{Op: OpRevokeJoinToken, Name: "t1"}); r.Value != ResultOK {
			t.Fatalf("revoke = %d, want ResultOK", r.Value)
		}
		if r := apply(t, m, 10, &Command{Op: OpRevokeJoinToken, Name: "t1"}); r.Value != ResultNotFound {
			t.Fatalf("revoke again = %d, want ResultNotFound", r.Value)
		}
		if r := apply(t, m, 11, joiner("b", good, nowMs)); r.Value != ResultDenied {
			t.Fatalf("join with a revoked token = %d, want ResultDenied", r.Value)
		}
	})

	for _, c := range []*Command{
		{Op: OpCreateJoinToken},
		{Op: OpCreateJoinToken, JoinToken: &JoinToken{ID: "t"}},
		{Op: OpCreateJoinToken, JoinToken: &JoinToken{ID: "t", Hash: "h", Uses: -1}},
		{Op: OpRevokeJoinToken},
	} {
		if _, err := DecodeCommand(c.Encode()); err == nil {
			t.Errorf("DecodeCommand(%s) accepted a malformed command", c.Encode())
		}
	}
}

func TestJoinTokenFormat(t *testing.T) {
	id, secret, token, err := NewJoinToken()
	if err != nil {
		t.Fatal(err)
	}
	gotID, gotSecret, err := ParseJoinToken(token + "\n")
	if err != nil || gotID != id || gotSecret != secret {
		t.Fatalf("ParseJoinToken(%q) = %q, %q, %v; want %q, %q", token, gotID, gotSecret, err, id, secret)
	}
	for _, bad := range []string{"", "sdjt.", "sdjt.0123456789abcdef", "sdjt.0123456789abcdef.", "sdjt.short.secret", "sdjt.0123456789abcdeg.s", "xxxx.0123456789abcdef.s"} {
		if _, _, err := ParseJoinToken(bad); err == nil {
			t.Errorf("ParseJoinToken(%q) accepted it", bad)
		}
	}
}
