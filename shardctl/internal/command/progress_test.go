package command

import (
	"bytes"
	"strings"
	"sync"
	"testing"
)

// TestOperationProgress pins the STEP column that drain-node and
// rebalance/operations both print through operationView.progress.
func TestOperationProgress(t *testing.T) {
	cases := []struct {
		name string
		op   operationView
		want string
	}{
		{"running", operationView{Status: "running", Step: "2/3 add"}, "2/3 add"},
		{"done", operationView{Status: "done", Step: "3/3 remove", Duration: "2.5s"}, "took 2.5s"},
		{"failed", operationView{Status: "failed", Error: "replica lags", Duration: "1s"}, "replica lags"},
		{"planned", operationView{Status: "planned"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.op.progress(); got != tc.want {
				t.Errorf("progress(%+v) = %q, want %q", tc.op, got, tc.want)
			}
		})
	}
}

// The plain progress line: a line per change of phase or shards, not of
// bytes alone.
func TestLineMeter(t *testing.T) {
	var b bytes.Buffer
	m := &lineMeter{w: &b}
	for _, s := range []step{
		{label: "backup x", shardsTotal: 8},
		{label: "backup x", shardsTotal: 8, bytesDone: 100},
		{label: "backup x", shardsDone: 3, shardsTotal: 8, bytesDone: 12_900_000},
		{label: "backup x", shardsDone: 3, shardsTotal: 8, bytesDone: 13_000_000},
	} {
		m.show(s)
	}
	m.end(true)
	want := "backup x: 0/8 shards, 0 B\nbackup x: 3/8 shards, 12.3 MiB\n"
	if b.String() != want {
		t.Errorf("lineMeter wrote %q, want %q", b.String(), want)
	}
}

// The bar meter draws its trackers to its writer and its render goroutine
// ends with end.
func TestBarMeter(t *testing.T) {
	var b syncBuffer
	m := newBarMeter(&b)
	m.show(step{label: "restore x", phase: "verify", shardsTotal: 2, bytesTotal: 4 << 20})
	m.show(step{label: "restore x", phase: "shards", shardsDone: 1, shardsTotal: 2, bytesDone: 2 << 20, bytesTotal: 4 << 20})
	m.end(true)
	for _, want := range []string{"restore x: verify 0/2 shards", "restore x: shards 1/2 shards"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("barMeter wrote %q, want it to hold %q", b.String(), want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the bar's render goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestHumanBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {12_900_000, "12.3 MiB"}, {1 << 30, "1.0 GiB"}, {5 << 40, "5.0 TiB"}, {1 << 62, "4194304.0 TiB"},
	} {
		if got := humanBytes(tc.n); got != tc.want {
			t.Errorf("humanBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
