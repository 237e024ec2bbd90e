package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
)

func TestPct(t *testing.T) {
	for _, tc := range []struct {
		in   float64
		want string
	}{{0, "0%"}, {0.05, "5%"}, {0.1, "10%"}, {0.0123, "1.23%"}, {0.105, "10.5%"}, {1.5, "150%"}} {
		if got := pct(tc.in); got != tc.want {
			t.Errorf("pct(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestWriteBackup checks that the backup report states each figure and
// says plainly whether each target was met.
func TestWriteBackup(t *testing.T) {
	full := scenario.BackupTaken{ID: "F", Kind: "full", Bytes: 200_000_000, Messages: 1_010_001, Elapsed: 20 * time.Second, RunTime: 19 * time.Second}
	result := func(incr scenario.BackupTaken, restore *scenario.RestoreResult) *scenario.BackupResult {
		return &scenario.BackupResult{
			Config:    scenario.BackupConfig{Delay: time.Hour, Changes: 10_000},
			Published: 1_000_000, Due: 10_000, FillRate: 25_000, ChangesPublished: 10_000, ChangesAcked: 10_000,
			Full: full, Incremental: incr, Judgement: scenario.JudgeBackup(full, incr), Restore: restore,
		}
	}
	for _, tc := range []struct {
		name        string
		run         Run
		want        []string
		wantSummary []string
	}{
		{
			name: "targets met, restore matches",
			run: Run{Name: "sundial", Config: "3 brokers", Backup: result(scenario.BackupTaken{ID: "I", Kind: "incremental", Bytes: 2_000_000, Messages: 20_000, Elapsed: time.Second},
				&scenario.RestoreResult{Elapsed: 30 * time.Second, Messages: 1_030_000, SourcePending: 1_010_001, RestoredPending: 1_010_001, Match: true})},
			want: []string{
				"Backup (sundial, 3 brokers): at the full backup 1,000,000 messages due in 1h0m0s (filled at 25000 msgs/s) and 10,000 due at once; between the backups 10,000 more published and 10,000 acked",
				"  full          200,000,000 B     20.00 s  (F, 1,010,001 messages, the run's own time 19.00 s)",
				"  incremental     2,000,000 B      1.00 s  (I, 20,000 messages",
				"  bytes: incremental / full = 1%       target ≤ 5%   MET",
				"  time:  incremental / full = 5%       target ≤ 10%  MET",
				"30.00 s, 1,030,000 messages restored; 1,010,001 pending, the backed-up cluster had 1,010,001: match",
			},
			wantSummary: []string{"1,010,000 pending; full 190.7 MiB in 20.00 s", "incremental 1% of the bytes (≤ 5% met), 5% of the time (≤ 10% met)", "restore 30.00 s, pending match"},
		},
		{
			name: "targets missed, restore short",
			run: Run{Name: "sundial", Config: "3 brokers", Error: "restored 5 pending", Backup: result(scenario.BackupTaken{ID: "I", Bytes: 20_000_000, Elapsed: 4 * time.Second},
				&scenario.RestoreResult{SourcePending: 10, RestoredPending: 5})},
			want:        []string{"= 10%      target ≤ 5%   MISSED", "= 20%      target ≤ 10%  MISSED", "5 pending, the backed-up cluster had 10: MISMATCH", "ERROR: restored 5 pending"},
			wantSummary: []string{"(≤ 5% missed)", "(≤ 10% missed)", "pending MISMATCH"},
		},
		{
			name:        "no incremental",
			run:         Run{Name: "sundial", Backup: result(scenario.BackupTaken{}, nil)},
			want:        []string{"  incremental  not taken"},
			wantSummary: []string{"; no incremental backup"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sb strings.Builder
			WriteBackup(&sb, tc.run)
			out := sb.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("WriteBackup() = \n%s\nwant it to contain %q", out, w)
				}
			}
			if tc.run.Backup.Incremental.ID == "" && strings.Contains(out, "target ≤") {
				t.Errorf("WriteBackup() = \n%s\nwant no target judged without an incremental backup", out)
			}
			sum := Summary(tc.run)
			for _, w := range tc.wantSummary {
				if !strings.Contains(sum, w) {
					t.Errorf("Summary() = %q, want it to contain %q", sum, w)
				}
			}
		})
	}
	var sb strings.Builder
	WriteBackup(&sb, Run{Name: "redis-always"})
	if sb.Len() != 0 {
		t.Errorf("WriteBackup(a run without a backup) = %q, want nothing", sb.String())
	}
}
