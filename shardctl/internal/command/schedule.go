package command

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// scheduleCommand is backup schedule set, show and clear.
func scheduleCommand(plain func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, leaf func(*cli.Command) *cli.Command) *cli.Command {
	return &cli.Command{
		Name:            "schedule",
		Usage:           "set, show and clear the cluster's backup schedule (run by the meta leader, with retention)",
		HideHelpCommand: true,
		Action:          notFound,
		Subcommands: []*cli.Command{
			leaf(&cli.Command{
				Name:  "set",
				Usage: "back up to --dest every --every (the first at once), full every --full-every, deleting backups older than --keep",
				Description: "A scheduled backup is full when the last full one started --full-every ago (without\n" +
					"--full-every, every backup is full), else incremental on the newest in --dest. It never starts\n" +
					"while another runs. After each, the backups in --dest finished more than --keep ago are deleted,\n" +
					"unless a kept incremental builds on them (without --keep, none is). Durations take d for days: 7d.",
				Flags: []cli.Flag{
					locationFlag("dest", "where the backups go"),
					&cli.StringFlag{Name: "every", Usage: "start a backup every `D`, at least 1m (required), e.g. 1h"},
					&cli.StringFlag{Name: "full-every", Usage: "make a full backup every `D`, at least --every (default: every backup full), e.g. 1d"},
					&cli.StringFlag{Name: "keep", Usage: "delete backups that finished more than `D` ago, at least --full-every (default: keep all), e.g. 7d"},
				},
				Action: plain(runScheduleSet),
			}),
			leaf(&cli.Command{Name: "show", Usage: "show the backup schedule, when the next backup starts and the last one it ran", Action: plain(runScheduleShow)}),
			leaf(&cli.Command{Name: "clear", Usage: "stop scheduled backups (the backups taken stay)", Action: plain(runScheduleClear)}),
		},
	}
}

// parseDays parses a Go duration that may start with whole days: 7d,
// 1d12h, 90m.
func parseDays(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.ParseUint(days, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q: whole days before d", s)
	}
	d := time.Duration(n) * 24 * time.Hour //nolint:gosec // at most 65535 days
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, err
		}
		d += r
	}
	return d, nil
}

// formatDays is d as parseDays reads it, without zero units: 7d, 1d12h,
// 1h30m.
func formatDays(d time.Duration) string {
	if d == 0 {
		return "0"
	}
	var b strings.Builder
	if days := d / (24 * time.Hour); days > 0 {
		fmt.Fprintf(&b, "%dd", days)
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

// durationFlag is the optional duration flag name in milliseconds (0 when
// not given).
func durationFlag(c *cli.Context, name string) (int64, error) {
	s := c.String(name)
	if s == "" {
		return 0, nil
	}
	d, err := parseDays(s)
	if err != nil || d <= 0 {
		return 0, usagef("--%s %q: want a positive duration such as 90m, 1h or 7d", name, s)
	}
	return d.Milliseconds(), nil
}

// scheduleView is the backup schedule as shardctl shows it.
type scheduleView struct {
	Set         bool       `json:"set" yaml:"set"`
	Dest        string     `json:"dest,omitempty" yaml:"dest,omitempty"`
	EveryMs     int64      `json:"every_ms,omitempty" yaml:"every_ms,omitempty"`
	FullEveryMs int64      `json:"full_every_ms,omitempty" yaml:"full_every_ms,omitempty"`
	KeepMs      int64      `json:"keep_ms,omitempty" yaml:"keep_ms,omitempty"`
	NextAt      *time.Time `json:"next_at,omitempty" yaml:"next_at,omitempty"`
	LastRunID   string     `json:"last_run_id,omitempty" yaml:"last_run_id,omitempty"`
}

func newScheduleView(sc *sundialv1.BackupSchedule) scheduleView {
	return scheduleView{
		Set: sc.GetEveryMs() != 0, Dest: sc.GetDest(), EveryMs: sc.GetEveryMs(), FullEveryMs: sc.GetFullEveryMs(), KeepMs: sc.GetKeepMs(),
		NextAt: msTime(sc.GetNextAtUnixMs()), LastRunID: sc.GetLastRunId(),
	}
}

func renderSchedule(w io.Writer, format string, v scheduleView) error {
	return render(w, format, v, func(w io.Writer) {
		if !v.Set {
			fmt.Fprintln(w, "no backup schedule")
			return
		}
		ms := func(n int64, none string) string {
			if n == 0 {
				return none
			}
			return formatDays(time.Duration(n) * time.Millisecond)
		}
		t := newTable(w, "DEST", "EVERY", "FULL EVERY", "KEEP", "NEXT", "LAST RUN")
		t.AppendRow([]any{v.Dest, ms(v.EveryMs, "-"), ms(v.FullEveryMs, "every backup"), ms(v.KeepMs, "all"), timeOrDash(v.NextAt), orDash(v.LastRunID)})
		t.Render()
	})
}

func runScheduleSet(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup schedule set"); err != nil {
		return err
	}
	dest, err := backupLocation(c, "dest")
	if err != nil {
		return err
	}
	if c.String("every") == "" {
		return usagef("--every is required: how often a backup starts, at least 1m, e.g. 1h")
	}
	sc := &sundialv1.BackupSchedule{Dest: dest}
	for _, f := range []struct {
		name string
		ms   *int64
	}{{"every", &sc.EveryMs}, {"full-every", &sc.FullEveryMs}, {"keep", &sc.KeepMs}} {
		if *f.ms, err = durationFlag(c, f.name); err != nil {
			return err
		}
	}
	req := &sundialv1.SetBackupScheduleRequest{Schedule: sc}
	if bad := validate.SetBackupSchedule(req); len(bad) > 0 {
		flag := strings.ReplaceAll(strings.TrimSuffix(strings.TrimPrefix(bad[0].Field, "schedule."), "_ms"), "_", "-")
		return usagef("--%s %s: %s", flag, c.String(flag), scheduleReason(bad[0]))
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).SetBackupSchedule(ctx, req)
		if err != nil {
			return backupRefusal("backup schedule set", err)
		}
		return renderSchedule(e.stdout, e.output, newScheduleView(resp))
	})
}

// scheduleReason says, in flag terms, why validate.SetBackupSchedule
// refused a field.
func scheduleReason(v apierr.FieldViolation) string {
	switch v.Field {
	case "schedule.every_ms":
		return "at least 1m"
	case "schedule.full_every_ms":
		return "at least --every (or leave it out: every backup full)"
	case "schedule.keep_ms":
		return "at least --full-every and --every (or leave it out: keep every backup): the chain kept needs its full backup"
	}
	return v.Description
}

func runScheduleShow(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup schedule show"); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).GetBackupSchedule(ctx, &sundialv1.GetBackupScheduleRequest{})
		if err != nil {
			return backupRefusal("backup schedule show", err)
		}
		return renderSchedule(e.stdout, e.output, newScheduleView(resp))
	})
}

func runScheduleClear(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup schedule clear"); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).SetBackupSchedule(ctx, &sundialv1.SetBackupScheduleRequest{Schedule: &sundialv1.BackupSchedule{}})
		if err != nil {
			return backupRefusal("backup schedule clear", err)
		}
		return renderSchedule(e.stdout, e.output, newScheduleView(resp))
	})
}
