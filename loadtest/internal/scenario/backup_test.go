package scenario

import (
	"testing"
	"time"
)

func TestJudgeBackup(t *testing.T) {
	full := BackupTaken{Bytes: 100_000_000, Elapsed: 20 * time.Second}
	for _, tc := range []struct {
		name string
		full BackupTaken
		incr BackupTaken
		want BackupJudgement
	}{
		{"both well within", full, BackupTaken{Bytes: 1_000_000, Elapsed: time.Second},
			BackupJudgement{BytesRatio: 0.01, TimeRatio: 0.05, BytesMet: true, TimeMet: true}},
		{"exactly at the targets", full, BackupTaken{Bytes: 5_000_000, Elapsed: 2 * time.Second},
			BackupJudgement{BytesRatio: 0.05, TimeRatio: 0.1, BytesMet: true, TimeMet: true}},
		{"bytes over", full, BackupTaken{Bytes: 6_000_000, Elapsed: time.Second},
			BackupJudgement{BytesRatio: 0.06, TimeRatio: 0.05, TimeMet: true}},
		{"time over", full, BackupTaken{Bytes: 1_000_000, Elapsed: 3 * time.Second},
			BackupJudgement{BytesRatio: 0.01, TimeRatio: 0.15, BytesMet: true}},
		{"no full figures", BackupTaken{}, BackupTaken{Bytes: 1, Elapsed: time.Millisecond}, BackupJudgement{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := JudgeBackup(tc.full, tc.incr)
			if !near(got.BytesRatio, tc.want.BytesRatio) || !near(got.TimeRatio, tc.want.TimeRatio) || got.BytesMet != tc.want.BytesMet || got.TimeMet != tc.want.TimeMet {
				t.Fatalf("JudgeBackup(%+v, %+v) = %+v, want %+v", tc.full, tc.incr, got, tc.want)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }
