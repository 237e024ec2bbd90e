package format

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// Backup ids for chain tests, in time order.
const (
	idA = "20261201T000000Z-00000a"
	idB = "20261202T000000Z-00000b"
	idC = "20261203T000000Z-00000c"
	idD = "20261204T000000Z-00000d"
	idE = "20261205T000000Z-00000e"
)

// day is the Unix ms of 2026-12-0n.
func day(n int) int64 { return time.Date(2026, 12, n, 0, 0, 0, 0, time.UTC).UnixMilli() }

// bk builds a manifest for chain tests; shards are "<n>f@<index>" (full)
// or "<n>i<since>@<index>" (incremental).
func bk(id, parent string, finished int64, shards ...string) Manifest {
	m := Manifest{Format: ManifestFormat, ID: id, Parent: parent, Kind: KindFull, ClusterID: "c", FinishedUnixMs: finished}
	if parent != "" {
		m.Kind = KindIncremental
	}
	for _, s := range shards {
		var e ShardEntry
		if strings.Contains(s, "f") {
			if _, err := fmt.Sscanf(s, "%df@%d", &e.Shard, &e.Index); err != nil {
				panic(fmt.Sprintf("bk: shard %q is not <n>f@<index>: %v", s, err))
			}
			e.Kind = KindFull
		} else {
			if _, err := fmt.Sscanf(s, "%di%d@%d", &e.Shard, &e.Since, &e.Index); err != nil {
				panic(fmt.Sprintf("bk: shard %q is not <n>i<since>@<index>: %v", s, err))
			}
			e.Kind = KindIncremental
		}
		e.FileEntry = FileEntry{Name: ShardFileName(id, e.Shard), SHA256: sumA}
		m.Shards = append(m.Shards, e)
	}
	return m
}

func ids(ms []Manifest) []string {
	var s []string
	for _, m := range ms {
		s = append(s, m.ID)
	}
	return s
}

func TestChain(t *testing.T) {
	a, b, c := bk(idA, "", day(1)), bk(idB, idA, day(2)), bk(idC, idB, day(3))
	d := bk(idD, "", day(4))
	other := bk(idE, idD, day(5))
	other.ClusterID = "another"
	looped := []Manifest{bk(idA, idB, 0), bk(idB, idA, 0)}
	tests := []struct {
		name    string
		all     []Manifest
		id      string
		want    []string
		wantErr error
		says    string
	}{
		{"full", []Manifest{a, b, c, d}, idA, []string{idA}, nil, ""},
		{"two incrementals", []Manifest{c, d, a, b}, idC, []string{idA, idB, idC}, nil, ""},
		{"one incremental", []Manifest{a, b, c}, idB, []string{idA, idB}, nil, ""},
		{"missing parent", []Manifest{a, c, d}, idC, nil, ErrBrokenChain, idC + " builds on " + idB + ", which is missing"},
		{"unknown id", []Manifest{a, b}, idE, nil, ErrNoBackup, idE},
		{"other cluster", []Manifest{d, other}, idE, nil, ErrBrokenChain, `of cluster "c"`},
		{"cycle", looped, idA, nil, ErrBrokenChain, "cycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Chain(tt.all, tt.id)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("Chain(%s) = %v, %v, want %v saying %q", tt.id, ids(got), err, tt.wantErr, tt.says)
				}
				return
			}
			if err != nil || !slices.Equal(ids(got), tt.want) {
				t.Fatalf("Chain(%s) = %v, %v, want %v", tt.id, ids(got), err, tt.want)
			}
		})
	}
}

// plan renders a ShardPlan as "shard: index,index..." lines, sorted.
func plan(p map[uint64][]ShardEntry) []string {
	var lines []string
	for shard, es := range p {
		var steps []string
		for _, e := range es {
			steps = append(steps, fmt.Sprintf("%s@%d", e.Kind[:1], e.Index))
		}
		lines = append(lines, fmt.Sprintf("%d: %s", shard, strings.Join(steps, " ")))
	}
	slices.Sort(lines)
	return lines
}

func TestShardPlan(t *testing.T) {
	tests := []struct {
		name  string
		chain []Manifest
		want  []string
		says  string // the error, when there is one
	}{
		{"full", []Manifest{bk(idA, "", 0, "1f@10", "2f@20")},
			[]string{"1: f@10", "2: f@20"}, ""},
		{"full then incrementals", []Manifest{bk(idA, "", 0, "1f@10", "2f@20"), bk(idB, idA, 0, "1i10@15", "2i20@25"), bk(idC, idB, 0, "1i15@30", "2i25@26")},
			[]string{"1: f@10 i@15 i@30", "2: f@20 i@25 i@26"}, ""},
		{"full capture in an incremental backup", []Manifest{bk(idA, "", 0, "1f@10", "2f@20"), bk(idB, idA, 0, "1i10@15", "2f@40"), bk(idC, idB, 0, "1i15@30", "2i40@50")},
			[]string{"1: f@10 i@15 i@30", "2: f@40 i@50"}, ""},
		{"shard added later", []Manifest{bk(idA, "", 0, "1f@10"), bk(idB, idA, 0, "1i10@15", "3f@5")},
			[]string{"1: f@10 i@15", "3: f@5"}, ""},
		{"shard gone from the last backup", []Manifest{bk(idA, "", 0, "1f@10", "2f@20"), bk(idB, idA, 0, "1i10@15")},
			[]string{"1: f@10 i@15"}, ""},
		{"gap", []Manifest{bk(idA, "", 0, "1f@10", "2f@20"), bk(idB, idA, 0, "1i10@15", "2i21@25")},
			nil, "shard 2: backup " + idB + " holds changes since index 21, but backup " + idA + " captured it at index 20"},
		{"gap after a full capture", []Manifest{bk(idA, "", 0, "1f@10"), bk(idB, idA, 0, "1f@40"), bk(idC, idB, 0, "1i15@50")},
			nil, "shard 1: backup " + idC + " holds changes since index 15, but backup " + idB + " captured it at index 40"},
		{"incremental without a full capture", []Manifest{bk(idA, "", 0, "1f@10"), bk(idB, idA, 0, "1i10@15", "2i3@7")},
			nil, "shard 2: backup " + idB + " holds changes since index 3, and no backup before it"},
		{"empty chain", nil, nil, "no backups"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ShardPlan(tt.chain)
			if tt.says != "" {
				if !errors.Is(err, ErrBrokenChain) || !strings.Contains(err.Error(), tt.says) {
					t.Fatalf("ShardPlan = %v, %v, want ErrBrokenChain saying %q", plan(got), err, tt.says)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(plan(got), tt.want) {
				t.Fatalf("ShardPlan = %v, %v, want %v", plan(got), err, tt.want)
			}
		})
	}
}

func TestShardPlanEntries(t *testing.T) {
	chain := []Manifest{bk(idA, "", 0, "1f@10"), bk(idB, idA, 0, "1i10@15")}
	got, err := ShardPlan(chain)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ShardFileName(idA, 1), ShardFileName(idB, 1)}
	var names []string
	for _, e := range got[1] {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("ShardPlan files of shard 1 = %v, want %v", names, want)
	}
}

func TestExpired(t *testing.T) {
	now := time.UnixMilli(day(10))
	const days3 = 3 * 24 * time.Hour // keeps what finished on day 7 or later
	tests := []struct {
		name string
		keep time.Duration
		all  []Manifest
		want []string
	}{
		{"nothing old", days3, []Manifest{bk(idA, "", day(8)), bk(idB, idA, day(9))}, nil},
		{"old chain replaced by a new full", days3, []Manifest{bk(idA, "", day(1)), bk(idB, idA, day(2)), bk(idC, "", day(8))},
			[]string{idA, idB}},
		{"old full kept for a recent incremental", days3, []Manifest{bk(idA, "", day(1)), bk(idB, idA, day(2)), bk(idC, idB, day(8))}, nil},
		{"newest full kept however old", days3, []Manifest{bk(idA, "", day(1)), bk(idB, "", day(2)), bk(idC, idB, day(3))},
			[]string{idA, idC}},
		{"only old incrementals", days3, []Manifest{bk(idA, "", day(1)), bk(idB, idA, day(2)), bk(idC, idA, day(3))},
			[]string{idB, idC}},
		{"recent incremental on a missing parent", days3, []Manifest{bk(idA, "", day(1)), bk(idC, idB, day(8))}, nil},
		{"keep zero", 0, []Manifest{bk(idA, "", day(1)), bk(idB, idA, day(9)), bk(idC, "", day(9)+1)},
			[]string{idA, idB}},
		{"none", days3, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Expired(tt.all, now, tt.keep); !slices.Equal(got, tt.want) {
				t.Fatalf("Expired(%v, keep %v) = %v, want %v", ids(tt.all), tt.keep, got, tt.want)
			}
		})
	}
}
