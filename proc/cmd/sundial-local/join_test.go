package main

import "testing"

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
			got, addrs, err := nextJoinSlot(tc.brokers, func(a string) bool { return tc.busy[a] })
			if err != nil || got != tc.want || addrs != DefaultLayout(tc.want).Brokers[tc.want-1] {
				t.Fatalf("nextJoinSlot(%d) = %d, %v, %v, want %d", tc.brokers, got, addrs, err, tc.want)
			}
		})
	}
	if i, _, err := nextJoinSlot(3, busyAll); err == nil {
		t.Fatalf("nextJoinSlot(every port busy) = %d, want an error", i)
	}
}
