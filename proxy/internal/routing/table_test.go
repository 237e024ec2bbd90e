package routing

import (
	"errors"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/receipt"
)

func testTable(shards int) *Table {
	rt := &sundialv1.RoutingTable{
		Version: 7,
		Topics:  []*sundialv1.TopicRoute{{Name: "wide", Partitions: 16}, {Name: "narrow", Partitions: 1}},
	}
	for id := 1; id <= shards; id++ {
		rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: uint64(id)})
	}
	return NewTable(rt, nil)
}

func TestDeadLetterRouting(t *testing.T) {
	tab := testTable(8)
	if got := tab.Partitions("wide.dlq"); got != 16 {
		t.Errorf("Partitions(wide.dlq) = %d, want 16 (the partitions of wide)", got)
	}
	for p := range uint32(16) {
		if got, want := tab.Locate("wide.dlq", p), tab.Locate("wide", p); got != want {
			t.Errorf("Locate(wide.dlq, %d) = %d, want %d (the shard of wide/%d)", p, got, want, p)
		}
	}
	dlq, base := tab.TopicShards("wide.dlq"), tab.TopicShards("wide")
	if len(dlq) != len(base) {
		t.Fatalf("TopicShards(wide.dlq) has %d shards, want %d", len(dlq), len(base))
	}
	for s, ps := range base {
		if len(dlq[s]) != len(ps) {
			t.Errorf("TopicShards(wide.dlq)[%d] = %v, want %v", s, dlq[s], ps)
		}
	}
	if tab.Fingerprint("wide.dlq") != tab.Fingerprint("wide") {
		t.Error("Fingerprint(wide.dlq) != Fingerprint(wide), want equal")
	}
	if got := tab.Partitions("unknown.dlq"); got != 1 {
		t.Errorf("Partitions(unknown.dlq) = %d, want 1", got)
	}
}

func TestLocateMessage(t *testing.T) {
	tab := testTable(8)
	wantPart := uint32(xxhash.Sum64String("order-17") % 16)
	for _, tc := range []struct {
		name      string
		sel       *sundialv1.MessageSelector
		wantShard uint64
		wantPart  uint32
		wantErr   error
	}{
		{"key", &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_Key{Key: "order-17"}}, tab.Locate("wide", wantPart), wantPart, nil},
		{"key on dlq", &sundialv1.MessageSelector{Topic: "wide.dlq", By: &sundialv1.MessageSelector_Key{Key: "order-17"}}, tab.Locate("wide", wantPart), wantPart, nil},
		{"key one partition", &sundialv1.MessageSelector{Topic: "narrow", By: &sundialv1.MessageSelector_Key{Key: "order-17"}}, tab.Locate("narrow", 0), 0, nil},
		{"id", &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_MessageId{MessageId: receipt.NewMessageID(5, 99, 1).String()}}, 5, 0, nil},
		{"bad id", &sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_MessageId{MessageId: "xyz"}}, 0, 0, ErrBadMessageID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shard, part, err := tab.LocateMessage(tc.sel)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("LocateMessage(%v) error = %v, want %v", tc.sel, err, tc.wantErr)
			}
			if shard != tc.wantShard || part != tc.wantPart {
				t.Errorf("LocateMessage(%v) = (%d, %d), want (%d, %d)", tc.sel, shard, part, tc.wantShard, tc.wantPart)
			}
		})
	}
}

func TestKeyPartitionMatchesPublish(t *testing.T) {
	for _, key := range []string{"a", "order-17", "tenant.job-9"} {
		if got, want := KeyPartition(key, 16), uint32(xxhash.Sum64String(key)%16); got != want {
			t.Errorf("KeyPartition(%q, 16) = %d, want %d", key, got, want)
		}
	}
	if got := KeyPartition("a", 0); got != 0 {
		t.Errorf("KeyPartition(a, 0) = %d, want 0", got)
	}
}

func TestFingerprintChangesWithPlacement(t *testing.T) {
	if testTable(8).Fingerprint("wide") == testTable(9).Fingerprint("wide") {
		t.Error("Fingerprint(wide) equal over 8 and 9 shards, want different")
	}
	if a, b := testTable(8), testTable(8); a.Fingerprint("wide") != b.Fingerprint("wide") {
		t.Error("Fingerprint(wide) differs between equal tables")
	}
}

// A starting shard stays off the ring; a partition that hands over is read
// on both shards, its keys are found on the old one until the hand-over
// is sealed, and unkeyed routing follows the ring.
func TestHandoverRouting(t *testing.T) {
	base := testTable(8)
	rt := &sundialv1.RoutingTable{Topics: base.Raw().GetTopics()}
	for id := uint64(1); id <= 8; id++ {
		rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: id})
	}
	rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: 9, Starting: true})
	if tab := NewTable(rt, nil); tab.ShardCount() != 8 || !tab.ring.Equal(base.ring) {
		t.Fatalf("NewTable with a starting shard: ShardCount() = %d, want 8 and the ring of the serving shards", tab.ShardCount())
	}
	key := "order-17"
	p := KeyPartition(key, 16)
	to := base.Locate("wide", p)
	from := to%8 + 1
	rt.Handovers = []*sundialv1.Handover{{Topic: "wide", Partition: p, FromShard: from, ToShard: to}}
	tab := NewTable(rt, nil)
	if got := tab.Locate("wide", p); got != to {
		t.Errorf("Locate(wide, %d) = %d, want %d (the ring's owner)", p, got, to)
	}
	if got := tab.LocateKey("wide.dlq", p); got != from {
		t.Errorf("LocateKey(wide.dlq, %d) = %d, want %d (keys stay on the old shard)", p, got, from)
	}
	if shard, part, err := tab.LocateMessage(&sundialv1.MessageSelector{Topic: "wide", By: &sundialv1.MessageSelector_Key{Key: key}}); err != nil || shard != from || part != p {
		t.Errorf("LocateMessage(key %s) = %d, %d, %v, want %d, %d", key, shard, part, err, from, p)
	}
	byShard := tab.TopicShards("wide")
	if !slices.Contains(byShard[from], p) || !slices.Contains(byShard[to], p) {
		t.Errorf("TopicShards(wide) = %v, want partition %d on shards %d and %d", byShard, p, from, to)
	}
	if tab.Fingerprint("wide") == base.Fingerprint("wide") {
		t.Error("Fingerprint(wide) unchanged by a hand-over, want changed (pages read another shard set)")
	}
	if !tab.Settling() || tab.Prior().Locate("wide", p) != from || tab.Prior().Locate("wide", (p+1)%16) != tab.Locate("wide", (p+1)%16) {
		t.Errorf("Settling() = %v, Prior().Locate(wide, %d) = %d; want true, %d (and the ring elsewhere)", tab.Settling(), p, tab.Prior().Locate("wide", p), from)
	}
	rt.Handovers[0].SealedAtUnixMs = 1
	sealed := NewTable(rt, nil)
	if got := sealed.LocateKey("wide", p); got != to {
		t.Errorf("LocateKey(wide, %d) after seal = %d, want %d", p, got, to)
	}
	if sealed.Settling() || sealed.Prior().Locate("wide", p) != to {
		t.Errorf("after seal: Settling() = %v, Prior().Locate(wide, %d) = %d; want false, %d", sealed.Settling(), p, sealed.Prior().Locate("wide", p), to)
	}
}

func TestHasGroup(t *testing.T) {
	tbl := NewTable(&sundialv1.RoutingTable{Topics: []*sundialv1.TopicRoute{
		{Name: "orders", Partitions: 2, Groups: []string{"billing", "default"}},
		{Name: "old", Partitions: 1}, // from a broker older than the groups field
	}}, nil)
	for _, tc := range []struct {
		topic, group string
		has, known   bool
	}{
		{"orders", "billing", true, true},
		{"orders", "audit", false, true},
		{"orders.dlq", "default", true, true}, // a dead-letter topic has its base's groups
		{"old", "default", false, false},
		{"missing", "default", false, false},
	} {
		if has, known := tbl.HasGroup(tc.topic, tc.group); has != tc.has || known != tc.known {
			t.Errorf("HasGroup(%q, %q) = %v, %v; want %v, %v", tc.topic, tc.group, has, known, tc.has, tc.known)
		}
	}
}
