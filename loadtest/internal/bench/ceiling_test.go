package bench

import (
	"strings"
	"testing"
)

func TestParseRaftCeiling(t *testing.T) {
	out := []byte(`goos: linux
goarch: amd64
pkg: github.com/sundialmq/sundial/broker/internal/host
BenchmarkRaftCeiling/proposers=8-2         	    1208	   9912345 ns/op	   1.31 MB/s	    100884 msgs/s
BenchmarkRaftCeiling/proposers=64-2        	    2000	   7012345 ns/op	   1.85 MB/s	    142611 msgs/s
PASS
`)
	for _, tc := range []struct {
		proposers int
		want      float64
	}{{8, 100884}, {64, 142611}} {
		got, err := parseRaftCeiling(out, tc.proposers)
		if err != nil || got != tc.want {
			t.Errorf("parseRaftCeiling(proposers=%d) = %v, %v; want %v", tc.proposers, got, err, tc.want)
		}
	}
	if _, err := parseRaftCeiling([]byte("PASS\n"), 8); err == nil || !strings.Contains(err.Error(), "proposers=8") {
		t.Errorf("parseRaftCeiling(no result) error = %v, want one naming the missing line", err)
	}
	if _, err := parseRaftCeiling([]byte("BenchmarkRaftCeiling/proposers=8-2 10 5 ns/op\n"), 8); err == nil || !strings.Contains(err.Error(), "no msgs/s") {
		t.Errorf("parseRaftCeiling(no metric) error = %v, want one saying msgs/s is missing", err)
	}
}
