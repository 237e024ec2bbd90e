package batch

import (
	"testing"

	"github.com/sundialmq/sundial/proxy/internal/routing"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// While a partition hands over, its unkeyed messages go to the new shard
// and its keyed ones to the old shard, which holds the keys; once the
// hand-over is sealed keyed ones go to the new shard too.
func TestSplitDuringHandover(t *testing.T) {
	table := func(sealedAt int64) (*routing.Table, uint32, uint64, uint64) {
		rt := &sundialv1.RoutingTable{Topics: []*sundialv1.TopicRoute{{Name: "t", Partitions: 1}}}
		for id := uint64(1); id <= 4; id++ {
			rt.Shards = append(rt.Shards, &sundialv1.Shard{ShardId: id})
		}
		to := routing.NewTable(rt, nil).Locate("t", 0)
		from := to%4 + 1
		rt.Handovers = []*sundialv1.Handover{{Topic: "t", Partition: 0, FromShard: from, ToShard: to, SealedAtUnixMs: sealedAt}}
		return routing.NewTable(rt, nil), 0, from, to
	}
	tab, _, from, to := table(0)
	parts := Split("r", msgs("t", "t k"), tab)
	got := map[uint64][]int{}
	for _, p := range parts {
		got[p.Shard] = p.Indices
	}
	if len(got) != 2 || len(got[to]) != 1 || got[to][0] != 0 || len(got[from]) != 1 || got[from][0] != 1 {
		t.Fatalf("Split(unkeyed, keyed) during hand-over %d→%d = %v, want unkeyed on %d, keyed on %d", from, to, got, to, from)
	}
	tab, _, _, to = table(5)
	if parts := Split("r", msgs("t", "t k"), tab); len(parts) != 1 || parts[0].Shard != to {
		t.Fatalf("Split after seal = %+v, want one part on %d", parts, to)
	}
}
