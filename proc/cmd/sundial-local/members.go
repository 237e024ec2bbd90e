package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// What a local cluster holds is read from its data directory, so that a
// `make run` after joins and removals brings back the cluster as it was
// left: the bootstrap brokers (cluster-members), the brokers that joined
// (a broker-N dir whose identity file names node N and a cluster), and
// the node ids the cluster removed (removed-nodes, which sundial-local
// writes whenever the cluster reports a node removed). A removed node is
// never started again: it would refuse to serve.

// removedFile lists, one a line, the node ids the cluster removed.
const removedFile = "removed-nodes"

// member is one broker a run starts.
type member struct {
	id     int
	joined bool // it joined after the bootstrap: started with --join
}

// brokerIdentity is what sundial-local reads of a broker's identity file
// (broker/internal/identity: identity.json in its data dir).
type brokerIdentity struct {
	NodeID    int    `json:"node_id"`
	ClusterID string `json:"cluster_id"`
}

// readIdentity reads the identity file of a broker's data dir; found is
// false when it has none.
func readIdentity(dir string) (id brokerIdentity, found bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, "identity.json"))
	if errors.Is(err, os.ErrNotExist) {
		return brokerIdentity{}, false, nil
	}
	if err != nil {
		return brokerIdentity{}, false, err
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return brokerIdentity{}, false, fmt.Errorf("%s: %w", filepath.Join(dir, "identity.json"), err)
	}
	return id, true, nil
}

// localMembers is what a run of dataDir starts: the bootstrap brokers
// 1..initial and every broker-N (N above initial, up to maxBroker) whose
// data dir holds an identity of node N in a cluster, leaving out the
// removed ids. skipped says, one line each, what it left out and why.
func localMembers(dataDir string, initial int) (members []member, skipped []string, err error) {
	removed, err := readRemoved(dataDir)
	if err != nil {
		return nil, nil, err
	}
	for id := 1; id <= maxBroker; id++ {
		dir := filepath.Join(dataDir, fmt.Sprintf("broker-%d", id))
		if id > initial {
			ident, found, err := readIdentity(dir)
			switch {
			case err != nil:
				return nil, nil, err
			case !found:
				continue
			case ident.ClusterID == "" || ident.NodeID != id:
				skipped = append(skipped, fmt.Sprintf("broker-%d: its data dir %s was never added to the cluster (no cluster id in its identity); not started", id, dir))
				continue
			}
		}
		if removed[id] {
			skipped = append(skipped, fmt.Sprintf("broker-%d: node %d was removed from the cluster; not started (its data dir %s can be deleted)", id, id, dir))
			continue
		}
		members = append(members, member{id: id, joined: id > initial})
	}
	return members, skipped, nil
}

// readRemoved reads the removed node ids recorded in dataDir.
func readRemoved(dataDir string) (map[int]bool, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, removedFile))
	if errors.Is(err, os.ErrNotExist) {
		return map[int]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	ids := map[int]bool{}
	for _, f := range strings.Fields(string(b)) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a node id", filepath.Join(dataDir, removedFile), f)
		}
		ids[id] = true
	}
	return ids, nil
}

// recordRemoved adds ids to the removed node ids of dataDir, and answers
// those it had not recorded before.
func recordRemoved(dataDir string, ids map[int]bool) ([]int, error) {
	known, err := readRemoved(dataDir)
	if err != nil {
		return nil, err
	}
	var added []int
	for id := range ids {
		if ids[id] && !known[id] {
			known[id] = true
			added = append(added, id)
		}
	}
	if len(added) == 0 {
		return nil, nil
	}
	all := make([]int, 0, len(known))
	for id := range known {
		all = append(all, id)
	}
	slices.Sort(all)
	slices.Sort(added)
	var b strings.Builder
	for _, id := range all {
		fmt.Fprintln(&b, id)
	}
	tmp := filepath.Join(dataDir, removedFile+".tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return nil, err
	}
	return added, os.Rename(tmp, filepath.Join(dataDir, removedFile))
}

// removedPoll is how often a run asks the proxy which nodes were removed.
const removedPoll = 3 * time.Second

// watchRemoved records, every removedPoll until ctx ends, the node ids
// the cluster (the proxy's GET /v1/cluster at proxyHTTP) reports removed,
// saying on out when it learns of one.
func watchRemoved(ctx context.Context, dataDir, proxyHTTP string, sec *secure, out io.Writer) {
	t := time.NewTicker(removedPoll)
	defer t.Stop()
	for {
		noteRemoved(ctx, dataDir, proxyHTTP, sec, out)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// noteRemoved records the node ids the cluster reports removed now, and
// answers every removed id recorded (nil if none could be read).
func noteRemoved(ctx context.Context, dataDir, proxyHTTP string, sec *secure, out io.Writer) map[int]bool {
	added, err := recordRemoved(dataDir, clusterRemovedIDs(ctx, proxyHTTP, sec))
	if err != nil {
		fmt.Fprintf(out, "sundial-local: recording removed nodes: %v\n", err)
	}
	for _, id := range added {
		fmt.Fprintf(out, "sundial-local: node %d was removed from the cluster; the next 'make run' leaves broker-%d out\n", id, id)
	}
	removed, _ := readRemoved(dataDir)
	return removed
}
