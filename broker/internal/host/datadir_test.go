package host

import (
	"errors"
	"strings"
	"testing"
)

// What Dragonboat panics with for a log behind the cluster or a corrupt log
// file becomes a DataDirError naming the data dir and what to do; anything
// else stays a panic with its stack (nil here).
func TestDataDirFault(t *testing.T) {
	for _, tc := range []struct {
		detail string
		want   error
		says   string
	}{
		{"invalid commitTo index 210, lastIndex() 9", ErrDataDirBehind, "is older than the one node 3 last ran on"},
		{"pebble/table: invalid table 000004 (checksum mismatch at 0/2033)\n(1) attached stack trace\n  -- stack trace:", ErrRaftLogCorrupt, "the Raft log in /d cannot be read (pebble/table: invalid table 000004 (checksum mismatch at 0/2033))"},
		{"pebble: corruption in the WAL", ErrRaftLogCorrupt, "cannot be read"},
		{"unexpected entry type", nil, ""},
	} {
		err := dataDirFault(tc.detail, "/d", 3)
		if tc.want == nil {
			if err != nil {
				t.Errorf("dataDirFault(%q) = %v, want nil", tc.detail, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("dataDirFault(%q) = %v, want %v", tc.detail, err, tc.want)
			continue
		}
		for _, s := range []string{tc.says, "/d", "remove-node --force 3", "--join"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("dataDirFault(%q) = %q, want it to say %q", tc.detail, err, s)
			}
		}
		if strings.Contains(err.Error(), "stack trace") {
			t.Errorf("dataDirFault(%q) = %q carries Dragonboat's stack", tc.detail, err)
		}
	}
}
