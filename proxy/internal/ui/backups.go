package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// backupsView is the Backups section of the Cluster page: the schedule,
// the runs the meta group remembers, and what the forms show.
type backupsView struct {
	Schedule    *scheduleRow // nil: no schedule set (or ScheduleErr)
	ScheduleErr *apiError
	Runs        []runRow // newest first
	RunsErr     *apiError
	Form        backupForms
}

// scheduleRow is the backup schedule as the page shows it.
type scheduleRow struct {
	Dest, Every, FullEvery, Keep string
	Next, NextIn                 string // when the next backup starts, and how far off
	LastRun, LastStatus          string // the last scheduled run and its status, if remembered
}

// runRow is one backup run.
type runRow struct {
	Run    *sundialv1.BackupRun
	Status string // RUNNING, DONE or FAILED
	Took   string // finished − started; so far for a running one
	Bytes  string
}

// backupForms are the values the Backups forms show: the schedule's (and
// its destination for Back up now), or those just posted when the post
// failed, so they can be corrected.
type backupForms struct {
	Dest, Every, FullEvery, Keep string // the schedule form
	NowDest                      string // Back up now
	Incremental                  bool
}

// backupsOf reads the schedule and the runs; each may fail on its own
// (with --auth, a token without the admin permission sees neither). r is
// a failed POST of a Backups form when the page shows its error.
func (h *Handler) backupsOf(ctx context.Context, r *http.Request) *backupsView {
	now := h.now()
	v := &backupsView{}
	runs, err := h.api.Backups.ListBackupRuns(ctx, &sundialv1.ListBackupRunsRequest{})
	if err != nil {
		v.RunsErr = toAPIError(err)
	}
	status := map[string]string{}
	for _, run := range runs.GetRuns() {
		row := runRow{Run: run, Status: backupStatus(run.GetStatus()), Bytes: humanBytes(run.GetBytes())}
		if started := run.GetStartedAtUnixMs(); started != 0 {
			switch end := run.GetFinishedAtUnixMs(); {
			case end != 0:
				row.Took = took(time.UnixMilli(end).Sub(time.UnixMilli(started)))
			case run.GetStatus() == sundialv1.BackupStatus_BACKUP_STATUS_RUNNING:
				row.Took = took(now.Sub(time.UnixMilli(started))) + " so far"
			}
		}
		status[run.GetId()] = row.Status
		v.Runs = append(v.Runs, row)
	}
	sc, err := h.api.Backups.GetBackupSchedule(ctx, &sundialv1.GetBackupScheduleRequest{})
	switch {
	case err != nil:
		v.ScheduleErr = toAPIError(err)
	case sc.GetEveryMs() != 0:
		v.Schedule = &scheduleRow{
			Dest: sc.GetDest(), Every: formatSpan(sc.GetEveryMs(), "-"), FullEvery: formatSpan(sc.GetFullEveryMs(), "every backup"),
			Keep: formatSpan(sc.GetKeepMs(), "all"), Next: formatTime(sc.GetNextAtUnixMs()), NextIn: relative(sc.GetNextAtUnixMs(), now),
			LastRun: sc.GetLastRunId(), LastStatus: status[sc.GetLastRunId()],
		}
		v.Form = backupForms{
			Dest: sc.GetDest(), Every: formatSpan(sc.GetEveryMs(), ""), FullEvery: formatSpan(sc.GetFullEveryMs(), ""),
			Keep: formatSpan(sc.GetKeepMs(), ""), NowDest: sc.GetDest(),
		}
	}
	if v.Form.NowDest == "" && len(v.Runs) > 0 {
		v.Form.NowDest = v.Runs[0].Run.GetDest()
	}
	if r.Method == http.MethodPost {
		f := r.PostForm
		switch path.Base(r.URL.Path) {
		case "backup-now":
			v.Form.NowDest, v.Form.Incremental = f.Get("dest"), f.Get("incremental") != ""
		case "backup-schedule":
			v.Form.Dest, v.Form.Every, v.Form.FullEvery, v.Form.Keep = f.Get("dest"), f.Get("every"), f.Get("full_every"), f.Get("keep")
		}
	}
	return v
}

// clusterAction runs one POST of the Cluster page (see act).
func (h *Handler) clusterAction(w http.ResponseWriter, r *http.Request, question func(url.Values) string, do func(ctx context.Context, form url.Values) (string, error)) {
	pg := actionPage{nav: "cluster", path: "/ui/cluster", show: func(w http.ResponseWriter, r *http.Request, _ url.Values, err *apiError) {
		h.showCluster(w, r, "", err)
	}}
	h.act(w, r, pg, question, do)
}

func noQuestion(url.Values) string { return "" }

// backupNow starts a backup (CreateBackup without wait) and answers the
// run started; the runs table follows it.
func (h *Handler) backupNow(w http.ResponseWriter, r *http.Request) {
	h.clusterAction(w, r, noQuestion, func(ctx context.Context, f url.Values) (string, error) {
		req := &sundialv1.CreateBackupRequest{Dest: strings.TrimSpace(f.Get("dest")), Incremental: f.Get("incremental") != ""}
		run, err := h.api.Backups.CreateBackup(ctx, req)
		if err != nil {
			return "", err
		}
		// The answer may be the run's start alone, before the meta leader
		// has its kind and shards.
		kind := run.GetKind()
		switch {
		case kind != "":
		case req.GetIncremental():
			kind = "incremental"
		default:
			kind = "full"
		}
		n := fmt.Sprintf("started %s backup %s to %s", kind, run.GetId(), run.GetDest())
		if total := run.GetShardsTotal(); total > 0 {
			n += fmt.Sprintf(" (%d shards)", total)
		}
		return n + "; the runs table follows it", nil
	})
}

// setBackupSchedule sets the schedule of the form; one whose keep deletes
// old backups asks first.
func (h *Handler) setBackupSchedule(w http.ResponseWriter, r *http.Request) {
	question := func(f url.Values) string {
		sc, err := scheduleOf(f)
		if err != nil || sc.GetKeepMs() == 0 {
			return "" // a bad form is refused without asking
		}
		return fmt.Sprintf("After each scheduled backup, the backups in %s that finished more than %s ago will be deleted, unless a kept incremental builds on them. Set this schedule?",
			sc.GetDest(), formatSpan(sc.GetKeepMs(), ""))
	}
	h.clusterAction(w, r, question, func(ctx context.Context, f url.Values) (string, error) {
		sc, err := scheduleOf(f)
		if err != nil {
			return "", err
		}
		got, err := h.api.Backups.SetBackupSchedule(ctx, &sundialv1.SetBackupScheduleRequest{Schedule: sc})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("backup schedule set: to %s every %s; the next backup starts %s", got.GetDest(), formatSpan(got.GetEveryMs(), "-"), formatTime(got.GetNextAtUnixMs())), nil
	})
}

// clearBackupSchedule clears the schedule (every_ms 0), asking first.
func (h *Handler) clearBackupSchedule(w http.ResponseWriter, r *http.Request) {
	question := func(url.Values) string {
		return "Clear the backup schedule? No backup starts on its own until a schedule is set again; the backups taken stay."
	}
	h.clusterAction(w, r, question, func(ctx context.Context, _ url.Values) (string, error) {
		if _, err := h.api.Backups.SetBackupSchedule(ctx, &sundialv1.SetBackupScheduleRequest{Schedule: &sundialv1.BackupSchedule{}}); err != nil {
			return "", err
		}
		return "backup schedule cleared", nil
	})
}

// scheduleOf reads the schedule form: dest (the API checks it), every
// (required: an empty one would clear the schedule), full_every and keep
// (empty: 0), durations as parseSpan reads them. Every bad field is named.
func scheduleOf(f url.Values) (*sundialv1.BackupSchedule, error) {
	sc := &sundialv1.BackupSchedule{Dest: strings.TrimSpace(f.Get("dest"))}
	var bad []fieldViolation
	span := func(field string, required bool) int64 {
		s := strings.TrimSpace(f.Get(field))
		if s == "" {
			if required {
				bad = append(bad, fieldViolation{field, "required: how often a backup starts, at least 1m (such as 1h); Clear schedule stops scheduled backups"})
			}
			return 0
		}
		d, err := parseSpan(s)
		if err != nil || d <= 0 {
			bad = append(bad, fieldViolation{field, "want a positive duration such as 90m, 1h or 7d, got " + strconv.Quote(s)})
			return 0
		}
		return d.Milliseconds()
	}
	sc.EveryMs, sc.FullEveryMs, sc.KeepMs = span("every", true), span("full_every", false), span("keep", false)
	if len(bad) > 0 {
		e := badInput(bad[0].Field, bad[0].Description)
		e.Fields = bad
		return nil, e
	}
	return sc, nil
}

// parseSpan parses a Go duration that may start with whole days, as
// shardctl's schedule flags do: 7d, 1d12h, 90m.
func parseSpan(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("ui: %q: whole days before d", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, err
		}
		d += r
	}
	return d, nil
}

// formatSpan is ms as parseSpan reads it, without zero units (7d, 1d12h,
// 1h30m); zero is none.
func formatSpan(ms int64, none string) string {
	if ms == 0 {
		return none
	}
	d := time.Duration(ms) * time.Millisecond
	var b strings.Builder
	if days := d / (24 * time.Hour); days > 0 {
		b.WriteString(strconv.FormatInt(int64(days), 10) + "d")
		d -= days * 24 * time.Hour
	}
	if d > 0 {
		s := d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		b.WriteString(s)
	}
	return b.String()
}

// took is a run's duration: to the millisecond under a second, else to
// the second.
func took(d time.Duration) string {
	if d < time.Second {
		return max(0, d).Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// humanBytes is n in B, KiB, MiB, GiB or TiB with one decimal, as
// shardctl shows a backup's size.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 3 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + string("KMGT"[i]) + "iB"
}

func backupStatus(s sundialv1.BackupStatus) string {
	return strings.TrimPrefix(s.String(), "BACKUP_STATUS_")
}
