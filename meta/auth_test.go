package meta

import (
	"bytes"
	"errors"
	"testing"
)

func hash(b byte) []byte   { return bytes.Repeat([]byte{b}, TokenHashBytes) }
func secret(b byte) []byte { return bytes.Repeat([]byte{b}, ReceiptKeyBytes) }

func tokenCmd(name, role string) *Command {
	return &Command{Op: OpCreateToken, Token: &Token{Name: name, Hash: hash(1), Role: role}, NowMs: 5}
}

// The auth commands: a bootstrap happens once, tokens name existing roles,
// a role in use is not deleted, the built-in admin role cannot be
// replaced or deleted, and rotation keeps two keys, newest first.
func TestAuthCommands(t *testing.T) {
	boot := &Command{Op: OpAuthBootstrap, Token: &Token{Name: "bootstrap", Hash: hash(9), Role: AdminRole}, ReceiptKey: &ReceiptKey{Secret: secret(1)}, NowMs: 1}
	role := &Command{Op: OpCreateRole, Role: &Role{Name: "demo", Grants: []Grant{{PermPublish, "demo*"}}}, NowMs: 2}
	cases := []struct {
		name  string
		setup []*Command
		c     *Command
		want  uint64
	}{
		{name: "bootstrap", c: boot, want: ResultOK},
		{name: "bootstrap again", setup: []*Command{boot}, c: boot, want: ResultNoop},
		{name: "bootstrap after its token was revoked", setup: []*Command{boot, {Op: OpRevokeToken, Name: "bootstrap"}}, c: boot, want: ResultNoop},
		{name: "token with the admin role", c: tokenCmd("a", AdminRole), want: ResultOK},
		{name: "token with an unknown role", c: tokenCmd("a", "nope"), want: ResultInvalid},
		{name: "token with a stored role", setup: []*Command{role}, c: tokenCmd("a", "demo"), want: ResultOK},
		{name: "token name taken", setup: []*Command{tokenCmd("a", AdminRole)}, c: tokenCmd("a", AdminRole), want: ResultExists},
		{name: "revoke unknown", c: &Command{Op: OpRevokeToken, Name: "a"}, want: ResultNotFound},
		{name: "revoke", setup: []*Command{tokenCmd("a", AdminRole)}, c: &Command{Op: OpRevokeToken, Name: "a"}, want: ResultOK},
		{name: "role admin is built in", c: &Command{Op: OpCreateRole, Role: &Role{Name: AdminRole, Grants: []Grant{{PermPublish, "*"}}}}, want: ResultExists},
		{name: "role taken", setup: []*Command{role}, c: role, want: ResultExists},
		{name: "delete admin", c: &Command{Op: OpDeleteRole, Name: AdminRole}, want: ResultInvalid},
		{name: "delete unknown role", c: &Command{Op: OpDeleteRole, Name: "demo"}, want: ResultNotFound},
		{name: "delete role in use", setup: []*Command{role, tokenCmd("a", "demo")}, c: &Command{Op: OpDeleteRole, Name: "demo"}, want: ResultInUse},
		{name: "delete role", setup: []*Command{role}, c: &Command{Op: OpDeleteRole, Name: "demo"}, want: ResultOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := NewState()
			for _, c := range tc.setup {
				if code, _ := s.Apply(c); code != ResultOK {
					t.Fatalf("setup %s = %d, want ok", c.Op, code)
				}
			}
			before := s.Clone()
			code, _ := s.Apply(tc.c)
			if code != tc.want {
				t.Fatalf("Apply(%s) = %d, want %d", tc.c.Op, code, tc.want)
			}
			changed := before.Auth.Clone()
			if changed == nil {
				changed = &Auth{}
			}
			if code != ResultOK && s.Auth != nil && s.Auth.Revision != changed.Revision {
				t.Errorf("refused %s changed the revision %d → %d", tc.c.Op, changed.Revision, s.Auth.Revision)
			}
			if code == ResultOK && s.Auth.Revision <= changed.Revision {
				t.Errorf("%s: revision %d → %d, want it to grow", tc.c.Op, changed.Revision, s.Auth.Revision)
			}
			if s.Version != before.Version {
				t.Errorf("%s changed the routing version", tc.c.Op)
			}
		})
	}
}

func TestBootstrapStoresTokenAndKey(t *testing.T) {
	s := NewState()
	s.Apply(&Command{Op: OpAuthBootstrap, Token: &Token{Name: "bootstrap", Hash: hash(9), Role: AdminRole}, ReceiptKey: &ReceiptKey{Secret: secret(1)}, NowMs: 7})
	tok := s.Auth.Tokens["bootstrap"]
	if tok == nil || !bytes.Equal(tok.Hash, hash(9)) || tok.CreatedAtMs != 7 {
		t.Fatalf("bootstrap token = %+v", tok)
	}
	if len(s.Auth.ReceiptKeys) != 1 || s.Auth.ReceiptKeys[0].ID != 1 {
		t.Fatalf("receipt keys = %+v, want key 1", s.Auth.ReceiptKeys)
	}
}

func TestRotateReceiptKeyKeepsTwo(t *testing.T) {
	s := NewState()
	for i := byte(1); i <= 3; i++ {
		s.Apply(&Command{Op: OpRotateReceiptKey, ReceiptKey: &ReceiptKey{ID: 77, Secret: secret(i)}})
	}
	ks := s.Auth.ReceiptKeys
	if len(ks) != 2 || ks[0].ID != 3 || ks[1].ID != 2 || !bytes.Equal(ks[0].Secret, secret(3)) {
		t.Fatalf("receipt keys after 3 rotations = %+v, want ids 3, 2 (newest first, ids assigned by apply)", ks)
	}
	// A token created later does not replace the keys.
	c := tokenCmd("a", AdminRole)
	c.ReceiptKey = &ReceiptKey{Secret: secret(9)}
	s.Apply(c)
	if s.Auth.ReceiptKeys[0].ID != 3 {
		t.Fatalf("create_token replaced the receipt keys: %+v", s.Auth.ReceiptKeys)
	}
}

func TestGrantMatches(t *testing.T) {
	cases := []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "any", true},
		{"*", "", true},
		{"demo*", "demo", true},
		{"demo*", "demo-1", true},
		{"demo*", "dem", false},
		{"demo*", "", false},
		{"orders", "orders", true},
		{"orders", "orders2", false},
		{"orders", "", false},
	}
	for _, tc := range cases {
		if got := (Grant{PermPublish, tc.pattern}).Matches(tc.topic); got != tc.want {
			t.Errorf("Grant{%q}.Matches(%q) = %v, want %v", tc.pattern, tc.topic, got, tc.want)
		}
	}
}

func TestDecodeAuthCommands(t *testing.T) {
	bad := []*Command{
		{Op: OpCreateToken},
		{Op: OpCreateToken, Token: &Token{Name: "a b", Hash: hash(1), Role: "r"}},
		{Op: OpCreateToken, Token: &Token{Name: "a", Hash: []byte{1}, Role: "r"}},
		{Op: OpCreateToken, Token: &Token{Name: "a", Hash: hash(1), Role: ""}},
		{Op: OpCreateToken, Token: &Token{Name: "a", Hash: hash(1), Role: "r"}, ReceiptKey: &ReceiptKey{Secret: []byte{1}}},
		{Op: OpAuthBootstrap, Token: &Token{Name: "a", Hash: hash(1), Role: "admin"}},
		{Op: OpRevokeToken},
		{Op: OpDeleteRole, Name: "x/y"},
		{Op: OpCreateRole, Role: &Role{Name: "r"}},
		{Op: OpCreateRole, Role: &Role{Name: "r", Grants: []Grant{{"write", "*"}}}},
		{Op: OpCreateRole, Role: &Role{Name: "r", Grants: []Grant{{PermPublish, "a*b"}}}},
		{Op: OpCreateRole, Role: &Role{Name: "r", Grants: []Grant{{PermPublish, ""}}}},
		{Op: OpCreateRole, Role: &Role{Name: "r", Grants: []Grant{{PermAdmin, "demo*"}}}},
		{Op: OpRotateReceiptKey},
		{Op: OpRotateReceiptKey, ReceiptKey: &ReceiptKey{Secret: secret(1)[:31]}},
	}
	for _, c := range bad {
		if _, err := DecodeCommand(c.Encode()); !errors.Is(err, ErrMalformedCommand) {
			t.Errorf("DecodeCommand(%s) = %v, want ErrMalformedCommand", c.Encode(), err)
		}
	}
	good := []*Command{
		tokenCmd("a.b-c_1", "r"),
		{Op: OpCreateRole, Role: &Role{Name: "r", Grants: []Grant{{PermPublish, "demo*"}, {PermAdmin, "*"}}}},
		{Op: OpRotateReceiptKey, ReceiptKey: &ReceiptKey{Secret: secret(1)}},
	}
	for _, c := range good {
		if _, err := DecodeCommand(c.Encode()); err != nil {
			t.Errorf("DecodeCommand(%s) = %v, want ok", c.Encode(), err)
		}
	}
}
