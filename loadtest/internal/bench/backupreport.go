package bench

import (
	"fmt"
	"io"
	"time"

	"github.com/sundialmq/sundial/loadtest/internal/scenario"
)

// backupSummary is the backup scenario's one line for the runs table.
func backupSummary(b *scenario.BackupResult) string {
	if b.Full.ID == "" {
		return fmt.Sprintf("%s pending, no full backup", count(b.Published+b.Due))
	}
	s := fmt.Sprintf("%s pending; full %s in %s", count(b.Published+b.Due), mib(b.Full.Bytes), secs(b.Full.Elapsed))
	if b.Incremental.ID == "" {
		return s + "; no incremental backup"
	}
	j := b.Judgement
	s += fmt.Sprintf("; incremental %s of the bytes (≤ %s %s), %s of the time (≤ %s %s)",
		pct(j.BytesRatio), pct(scenario.BackupBytesTarget), metWord(j.BytesMet), pct(j.TimeRatio), pct(scenario.BackupTimeTarget), metWord(j.TimeMet))
	if r := b.Restore; r != nil {
		s += fmt.Sprintf("; restore %s, pending %s", secs(r.Elapsed), matchWord(r.Match))
	}
	return s
}

// WriteBackup writes the backup scenario's figures and says whether each
// target was met; runs of other scenarios write nothing.
func WriteBackup(w io.Writer, r Run) {
	b := r.Backup
	if b == nil {
		return
	}
	fmt.Fprintf(w, "Backup (%s, %s): at the full backup %s messages due in %v (filled at %.0f msgs/s) and %s due at once; between the backups %s more published and %s acked\n",
		r.Name, r.Config, count(b.Published), b.Config.Delay, b.FillRate, count(b.Due), count(b.ChangesPublished), count(b.ChangesAcked))
	taken := func(label string, t scenario.BackupTaken) {
		if t.ID == "" {
			fmt.Fprintf(w, "  %-12s not taken\n", label)
			return
		}
		fmt.Fprintf(w, "  %-12s %12s B  %10s  (%s, %s messages, the run's own time %s)\n",
			label, count(uint64(t.Bytes)), secs(t.Elapsed), t.ID, count(uint64(t.Messages)), secs(t.RunTime))
	}
	taken("full", b.Full)
	taken("incremental", b.Incremental)
	if b.Full.ID != "" && b.Incremental.ID != "" {
		j := b.Judgement
		fmt.Fprintf(w, "  bytes: incremental / full = %-8s target ≤ %-4s %s\n", pct(j.BytesRatio), pct(scenario.BackupBytesTarget), targetWord(j.BytesMet))
		fmt.Fprintf(w, "  time:  incremental / full = %-8s target ≤ %-4s %s\n", pct(j.TimeRatio), pct(scenario.BackupTimeTarget), targetWord(j.TimeMet))
	}
	switch rs := b.Restore; {
	case rs != nil:
		fmt.Fprintf(w, "  restore of the incremental into a new cluster of the same shape: %s, %s messages restored; %s pending, the backed-up cluster had %s: %s\n",
			secs(rs.Elapsed), count(uint64(rs.Messages)), count(uint64(rs.RestoredPending)), count(uint64(rs.SourcePending)), matchWord(rs.Match))
	case b.Config.NoRestore:
		fmt.Fprintln(w, "  restore: not run (--restore=false)")
	}
	if r.Error != "" {
		fmt.Fprintf(w, "  ERROR: %s\n", r.Error)
	}
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

// pct renders a fraction as a percentage: 0.0123 → "1.23%".
func pct(f float64) string {
	s := fmt.Sprintf("%.2f", f*100)
	for len(s) > 1 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s + "%"
}

func metWord(met bool) string {
	if met {
		return "met"
	}
	return "missed"
}

func targetWord(met bool) string {
	if met {
		return "MET"
	}
	return "MISSED"
}

func matchWord(match bool) string {
	if match {
		return "match"
	}
	return "MISMATCH"
}
