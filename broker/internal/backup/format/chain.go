package format

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"
)

var (
	// ErrNoBackup is wrapped by the error for a backup id no manifest has.
	ErrNoBackup = errors.New("format: no such backup")
	// ErrBrokenChain is wrapped by the error for backups that cannot be
	// restored in order: a missing parent, a cycle, a shard whose
	// captures do not follow one another.
	ErrBrokenChain = errors.New("format: broken backup chain")
)

// Chain answers the backups a restore of id applies, in order: from the
// full backup at the root of its chain to id itself. A missing parent or a
// parent from another cluster wraps ErrBrokenChain; an id not in all wraps
// ErrNoBackup.
func Chain(all []Manifest, id string) ([]Manifest, error) {
	byID := make(map[string]Manifest, len(all))
	for _, m := range all {
		byID[m.ID] = m
	}
	m, ok := byID[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNoBackup, id)
	}
	chain := []Manifest{m}
	for m.Kind != KindFull {
		p, ok := byID[m.Parent]
		switch {
		case m.Parent == "":
			return nil, fmt.Errorf("%w: %s backup %s has no parent", ErrBrokenChain, m.Kind, m.ID)
		case !ok:
			return nil, fmt.Errorf("%w: backup %s builds on %s, which is missing", ErrBrokenChain, m.ID, m.Parent)
		case p.ClusterID != m.ClusterID:
			return nil, fmt.Errorf("%w: backup %s of cluster %q builds on %s of cluster %q", ErrBrokenChain, m.ID, m.ClusterID, p.ID, p.ClusterID)
		case len(chain) > len(all):
			return nil, fmt.Errorf("%w: backup %s's parents form a cycle", ErrBrokenChain, id)
		}
		m = p
		chain = append(chain, m)
	}
	slices.Reverse(chain)
	return chain, nil
}

// ShardPlan answers, for each shard of the last backup of chain (as Chain
// answers it), the captures a restore applies in order: the latest full
// capture of the shard in the chain, then every incremental capture of it
// after that. Each incremental capture must start at the index the one
// before it ended (Since equal to the previous Index), else the error,
// wrapping ErrBrokenChain, names the shard and the backups.
func ShardPlan(chain []Manifest) (map[uint64][]ShardEntry, error) {
	if len(chain) == 0 {
		return nil, fmt.Errorf("%w: no backups", ErrBrokenChain)
	}
	type step struct {
		e      ShardEntry
		backup string
	}
	steps := map[uint64][]step{}
	for _, m := range chain {
		for _, e := range m.Shards {
			s := steps[e.Shard]
			switch {
			case e.Kind == KindFull:
				s = s[:0]
			case len(s) == 0:
				return nil, fmt.Errorf("%w: shard %d: backup %s holds changes since index %d, and no backup before it in the chain holds a full capture of the shard",
					ErrBrokenChain, e.Shard, m.ID, e.Since)
			case e.Since != s[len(s)-1].e.Index:
				prev := s[len(s)-1]
				return nil, fmt.Errorf("%w: shard %d: backup %s holds changes since index %d, but backup %s captured it at index %d",
					ErrBrokenChain, e.Shard, m.ID, e.Since, prev.backup, prev.e.Index)
			}
			steps[e.Shard] = append(s, step{e, m.ID})
		}
	}
	last := chain[len(chain)-1]
	plan := make(map[uint64][]ShardEntry, len(last.Shards))
	for _, e := range last.Shards {
		for _, s := range steps[e.Shard] {
			plan[e.Shard] = append(plan[e.Shard], s.e)
		}
	}
	return plan, nil
}

// Expired answers, sorted, the ids of the backups retention deletes at
// now: those finished before now-keep that no kept backup needs through
// its chain. The newest full backup is always kept, as is every backup a
// kept one builds on.
func Expired(all []Manifest, now time.Time, keep time.Duration) []string {
	cutoff := now.Add(-keep).UnixMilli()
	byID := make(map[string]Manifest, len(all))
	for _, m := range all {
		byID[m.ID] = m
	}
	kept := map[string]bool{}
	keepChain := func(m Manifest) {
		for !kept[m.ID] {
			kept[m.ID] = true
			p, ok := byID[m.Parent]
			if m.Parent == "" || !ok {
				return
			}
			m = p
		}
	}
	var newestFull *Manifest
	for i, m := range all {
		if m.FinishedUnixMs >= cutoff {
			keepChain(m)
		}
		if m.Kind == KindFull && (newestFull == nil || newer(m, *newestFull)) {
			newestFull = &all[i]
		}
	}
	if newestFull != nil {
		keepChain(*newestFull)
	}
	var expired []string
	for _, m := range all {
		if !kept[m.ID] {
			expired = append(expired, m.ID)
		}
	}
	slices.Sort(expired)
	return slices.Compact(expired)
}

// newer reports whether a was made after b.
func newer(a, b Manifest) bool {
	return cmp.Or(cmp.Compare(a.CreatedUnixMs, b.CreatedUnixMs), cmp.Compare(a.ID, b.ID)) > 0
}
