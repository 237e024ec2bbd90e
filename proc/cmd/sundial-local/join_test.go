package main

import (
	"strings"
	"testing"
)

func TestNextJoinSlot(t *testing.T) {
	busyAll := func(string) bool { return true }
	for _, tc := range []struct {
		name    string
		brokers int
		busy    map[string]bool
		want    int
	}{
		{"after three brokers", 3, nil, 4},
		{"a joined broker runs at 4", 3, map[string]bool{"127.0.0.1:7504": true}, 5},
		{"only its raft port is taken", 3, map[string]bool{"127.0.0.1:7604": true, "127.0.0.1:7705": true}, 6},
		{"one broker", 1, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, addrs, err := nextJoinSlot(DefaultLayout(tc.brokers), tc.brokers, func(a string) bool { return tc.busy[a] }, func(int) bool { return false })
			if err != nil || got != tc.want || addrs != DefaultLayout(tc.want).Brokers[tc.want-1] {
				t.Fatalf("nextJoinSlot(%d) = %d, %v, %v, want %d", tc.brokers, got, addrs, err, tc.want)
			}
		})
	}
	if i, _, err := nextJoinSlot(DefaultLayout(3), 3, busyAll, func(int) bool { return false }); err == nil {
		t.Fatalf("nextJoinSlot(every port busy) = %d, want an error", i)
	}
}

// A slot whose node id the cluster removed is skipped: a removed id is
// never reused, so a broker started there would be refused.
func TestNextJoinSlotSkipsRemovedIDs(t *testing.T) {
	removed := map[int]bool{4: true, 5: true}
	got, _, err := nextJoinSlot(DefaultLayout(3), 3, func(string) bool { return false }, func(i int) bool { return removed[i] })
	if err != nil || got != 6 {
		t.Fatalf("nextJoinSlot(nodes 4 and 5 removed) = %d, %v, want 6", got, err)
	}
}

func TestRemovedNodeIDs(t *testing.T) {
	body := `{"routingVersion":"120","nodes":[{"nodeId":"1","state":"NODE_STATE_ACTIVE"},{"nodeId":"5","state":"NODE_STATE_REMOVED"}]}`
	got, err := removedNodeIDs(strings.NewReader(body))
	if err != nil || len(got) != 1 || !got[5] {
		t.Fatalf("removedNodeIDs = %v, %v, want {5}", got, err)
	}
}
