package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

func backupCommands(plain func(func(context.Context, *cli.Context, *env) error) cli.ActionFunc, leaf func(*cli.Command) *cli.Command) []*cli.Command {
	dest := func() cli.Flag { return locationFlag("dest", "where the backups are") }
	return []*cli.Command{
		leaf(&cli.Command{
			Name:  "create",
			Usage: "back up every shard and the catalog (topics, groups, settings, tokens, roles) to --dest; --wait follows the run to its end",
			Description: "A full backup captures every shard whole; --incremental builds on the newest complete backup in\n" +
				"--dest and captures each shard's changes since (a shard whose change journal does not reach back\n" +
				"so far is captured whole). The meta leader runs the backup: it goes on if shardctl stops waiting,\n" +
				"and shardctl backup status follows it. With --wait, progress goes to stderr (a bar on a terminal)\n" +
				"and the command exits 1 if the backup fails.",
			Flags: []cli.Flag{
				dest(),
				&cli.BoolFlag{Name: "incremental", Usage: "capture the changes since the newest complete backup in --dest"},
				&cli.BoolFlag{Name: "wait", Usage: "wait until the backup has finished, showing its progress"},
				noProgressFlag(),
				&cli.DurationFlag{Name: "wait-timeout", Value: 24 * time.Hour, Usage: "with --wait, stop waiting after `D` (the backup goes on)"},
			},
			Action: plain(runBackupCreate),
		}),
		leaf(&cli.Command{
			Name:   "list",
			Usage:  "list the backups in --dest, oldest first, and those without a manifest (unfinished or failed)",
			Flags:  []cli.Flag{dest()},
			Action: plain(runBackupList),
		}),
		leaf(&cli.Command{
			Name:   "runs",
			Usage:  "list the backup runs the cluster remembers (the running one and the last finished), newest first",
			Action: plain(runBackupRuns),
		}),
		leaf(&cli.Command{
			Name:      "status",
			Usage:     "show one backup run (default: the newest)",
			ArgsUsage: "[ID]",
			Action:    plain(runBackupStatus),
		}),
		leaf(&cli.Command{
			Name:  "verify",
			Usage: "read back every file of a backup and of the backups it builds on, checking sizes and checksums",
			Description: "Exits 1 naming the file when one is missing, truncated or altered. --timeout is at least 1h\n" +
				"here: every file is read back.",
			Flags:  []cli.Flag{dest(), backupFlag("the backup `ID` to verify (required; shardctl backup list shows them)")},
			Action: plain(runBackupVerify),
		}),
		leaf(&cli.Command{
			Name:  "delete",
			Usage: "delete a backup's files from --dest (refused while a kept incremental builds on it)",
			Description: "The manifest goes first, so a backup is never half there and listed. Asks for confirmation on a\n" +
				"terminal; needs --yes otherwise. --timeout is at least 10m here.",
			Flags:  []cli.Flag{dest(), backupFlag("the backup `ID` to delete (required)"), yesFlag()},
			Action: plain(runBackupDelete),
		}),
		leaf(restoreCommand(plain(runBackupRestore))),
		scheduleCommand(plain, leaf),
	}
}

// locationFlag is a destination URL flag.
func locationFlag(name, what string) cli.Flag {
	return &cli.StringFlag{Name: name, Usage: what + ": file:///absolute/dir or s3://bucket/prefix[?endpoint=host:port&region=R&tls=false] (required; S3 credentials come from the brokers' environment)"}
}

// backupFlag names one backup by id.
func backupFlag(usage string) cli.Flag { return &cli.StringFlag{Name: "backup", Usage: usage} }

func noProgressFlag() cli.Flag {
	return &cli.BoolFlag{Name: "no-progress", Usage: "show no progress on stderr"}
}

// backupLocation is the destination URL in flag name, checked as the
// proxy and brokers check it (validate.BackupLocation): what a user types
// for a path is answered with the URL to give.
func backupLocation(c *cli.Context, name string) (string, error) {
	loc := c.String(name)
	switch {
	case loc == "":
		return "", usagef("--%s is required: where the backups are, file:///absolute/dir or s3://bucket/prefix", name)
	case strings.HasPrefix(loc, "/"):
		return "", usagef("--%s %q: a destination is a URL: file://%s", name, loc, loc)
	case !strings.Contains(loc, ":"):
		return "", usagef("--%s %q: a destination is a URL with an absolute path, file:///absolute/dir (the brokers write it: "+
			"a path relative to shardctl's directory means nothing to them), or s3://bucket/prefix", name, loc)
	}
	if bad := validate.BackupLocation(name, loc); len(bad) > 0 {
		return "", usagef("--%s %q: %s", name, loc, bad[0].Description)
	}
	return loc, nil
}

// backupIDFlag is --backup checked by validate.BackupID; "" when optional
// and not given.
func backupIDFlag(c *cli.Context, required bool) (string, error) {
	id := c.String("backup")
	if id == "" && !required {
		return "", nil
	}
	if bad := validate.BackupID("backup", id); len(bad) > 0 {
		return "", usagef("--backup %q: %s", id, bad[0].Description)
	}
	return id, nil
}

func noArgs(c *cli.Context, cmd string) error {
	if c.Args().Len() > 0 {
		return usagef("%s takes no arguments, got %q", cmd, c.Args().Slice())
	}
	return nil
}

// backupRefusal turns the server's refusal of a backup command into its
// message, exit 1; other errors stay op errors (printed with their code,
// field violations and a hint).
func backupRefusal(op string, err error) error {
	msg := op + ": " + status.Convert(err).Message()
	// hint adds what to do, unless the brokers' message says already.
	hint := func(h string) string {
		if strings.Contains(msg, "shardctl") {
			return msg
		}
		return msg + " (" + h + ")"
	}
	switch status.Code(err) {
	case codes.NotFound:
		return &silentError{msg: hint("shardctl backup list --dest URL lists the backups there")}
	case codes.FailedPrecondition, codes.DataLoss:
		return &silentError{msg: msg}
	case codes.Unimplemented:
		return &silentError{msg: hint("the proxy or the brokers do not serve backups, or not this backup's format: upgrade them")}
	}
	return &opError{op: op, err: err}
}

func backupsOf(cl *client.Client) sundialv1.BackupsClient {
	return sundialv1.NewBackupsClient(cl.Conn())
}

// backupRunView is a backup run as shardctl shows it.
type backupRunView struct {
	ID          string     `json:"id" yaml:"id"`
	Parent      string     `json:"parent,omitempty" yaml:"parent,omitempty"`
	Kind        string     `json:"kind" yaml:"kind"`
	Dest        string     `json:"dest" yaml:"dest"`
	Status      string     `json:"status" yaml:"status"` // running, done or failed
	Error       string     `json:"error,omitempty" yaml:"error,omitempty"`
	StartedAt   *time.Time `json:"started_at,omitempty" yaml:"started_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty" yaml:"finished_at,omitempty"`
	ShardsDone  uint32     `json:"shards_done" yaml:"shards_done"`
	ShardsTotal uint32     `json:"shards_total" yaml:"shards_total"`
	Bytes       int64      `json:"bytes" yaml:"bytes"`
	Messages    int64      `json:"messages" yaml:"messages"`
	Scheduled   bool       `json:"scheduled,omitempty" yaml:"scheduled,omitempty"`
}

func newBackupRunView(r *sundialv1.BackupRun) backupRunView {
	return backupRunView{
		ID: r.GetId(), Parent: r.GetParent(), Kind: r.GetKind(), Dest: r.GetDest(), Status: backupStatusName(r.GetStatus()), Error: r.GetError(),
		StartedAt: msTime(r.GetStartedAtUnixMs()), FinishedAt: msTime(r.GetFinishedAtUnixMs()),
		ShardsDone: r.GetShardsDone(), ShardsTotal: r.GetShardsTotal(), Bytes: r.GetBytes(), Messages: r.GetMessages(), Scheduled: r.GetScheduled(),
	}
}

func backupStatusName(s sundialv1.BackupStatus) string {
	switch s {
	case sundialv1.BackupStatus_BACKUP_STATUS_RUNNING:
		return "running"
	case sundialv1.BackupStatus_BACKUP_STATUS_DONE:
		return "done"
	case sundialv1.BackupStatus_BACKUP_STATUS_FAILED:
		return "failed"
	}
	return "unknown"
}

// msTime is a unix-millisecond time in UTC; nil for 0 (not set).
func msTime(ms int64) *time.Time {
	if ms == 0 {
		return nil
	}
	t := time.UnixMilli(ms).UTC()
	return &t
}

func timeOrDash(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// took is how long a finished run took, "-" while it runs.
func (v backupRunView) took() string {
	if v.StartedAt == nil || v.FinishedAt == nil {
		return "-"
	}
	return v.FinishedAt.Sub(*v.StartedAt).String()
}

func renderBackupRuns(w io.Writer, format string, vs []backupRunView) error {
	return render(w, format, vs, func(w io.Writer) {
		if len(vs) == 0 {
			fmt.Fprintln(w, "no backup runs")
			return
		}
		t := newTable(w, "ID", "KIND", "PARENT", "STATUS", "STARTED", "TOOK", "SHARDS", "MESSAGES", "BYTES", "DEST")
		for _, v := range vs {
			kind := v.Kind
			if v.Scheduled {
				kind += " (scheduled)"
			}
			t.AppendRow([]any{v.ID, kind, orDash(v.Parent), v.Status, timeOrDash(v.StartedAt), v.took(),
				fmt.Sprintf("%d/%d", v.ShardsDone, v.ShardsTotal), v.Messages, humanBytes(v.Bytes), v.Dest})
		}
		t.Render()
		for _, v := range vs {
			if v.Error != "" {
				fmt.Fprintf(w, "%s %s: %s\n", v.ID, v.Status, v.Error)
			}
		}
	})
}

// backupPollInterval is how often create --wait asks how the run goes.
const backupPollInterval = 500 * time.Millisecond

func runBackupCreate(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup create"); err != nil {
		return err
	}
	dest, err := backupLocation(c, "dest")
	if err != nil {
		return err
	}
	if c.Bool("wait") && c.Duration("wait-timeout") <= 0 {
		return usagef("--wait-timeout %v: want a positive duration", c.Duration("wait-timeout"))
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	var run *sundialv1.BackupRun
	err = withTimeout(ctx, e.timeout, func(ctx context.Context) error {
		var err error
		run, err = backupsOf(cl).CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: dest, Incremental: c.Bool("incremental")})
		return err
	})
	if err != nil {
		return backupRefusal("backup create", err)
	}
	if !c.Bool("wait") {
		if e.output == "table" {
			fmt.Fprintf(e.stderr, "backup %s started; shardctl backup status %s follows it\n", run.GetId(), run.GetId())
		}
		return renderBackupRuns(e.stdout, e.output, []backupRunView{newBackupRunView(run)})
	}
	m := newMeter(e, c.Bool("no-progress"))
	run, err = waitBackup(ctx, cl, e, run, m, c.Duration("wait-timeout"))
	m.end(err == nil && run.GetStatus() == sundialv1.BackupStatus_BACKUP_STATUS_DONE)
	id := run.GetId()
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return &silentError{msg: fmt.Sprintf("backup %s: stopped waiting; the backup goes on (shardctl backup status %s follows it)", id, id)}
	case errors.Is(err, context.DeadlineExceeded):
		return &silentError{msg: fmt.Sprintf("backup %s still running after %v; it goes on (shardctl backup status %s follows it)", id, c.Duration("wait-timeout"), id)}
	default:
		return &opError{op: "backup " + id + ": waiting for the run", err: err}
	}
	if err := renderBackupRuns(e.stdout, e.output, []backupRunView{newBackupRunView(run)}); err != nil {
		return err
	}
	if run.GetStatus() == sundialv1.BackupStatus_BACKUP_STATUS_FAILED {
		return &silentError{msg: fmt.Sprintf("backup %s failed: %s", id, run.GetError())}
	}
	return nil
}

// waitBackup asks for the run every backupPollInterval, showing each
// answer on m, until it has ended or limit passed. A failed ask that may
// be sent again (the proxy or a broker restarting) is.
func waitBackup(ctx context.Context, cl *client.Client, e *env, run *sundialv1.BackupRun, m meter, limit time.Duration) (*sundialv1.BackupRun, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		m.show(step{label: "backup " + run.GetId(), shardsDone: run.GetShardsDone(), shardsTotal: run.GetShardsTotal(), bytesDone: run.GetBytes()})
		if run.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_RUNNING {
			return run, nil
		}
		select {
		case <-ctx.Done():
			return run, ctx.Err()
		case <-time.After(backupPollInterval):
		}
		var next *sundialv1.BackupRun
		err := withTimeout(ctx, e.timeout, func(ctx context.Context) error {
			var err error
			next, err = backupsOf(cl).GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: run.GetId()})
			return err
		})
		switch {
		case err == nil:
			run = next
		case ctx.Err() != nil:
			return run, ctx.Err()
		case !apierr.Retryable(err, true):
			return run, err
		}
	}
}

func runBackupRuns(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup runs"); err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).ListBackupRuns(ctx, &sundialv1.ListBackupRunsRequest{})
		if err != nil {
			return backupRefusal("backup runs", err)
		}
		vs := []backupRunView{}
		for _, r := range resp.GetRuns() {
			vs = append(vs, newBackupRunView(r))
		}
		return renderBackupRuns(e.stdout, e.output, vs)
	})
}

func runBackupStatus(ctx context.Context, c *cli.Context, e *env) error {
	if c.Args().Len() > 1 {
		return usagef("backup status takes at most one argument, the run's ID (default: the newest), got %q", c.Args().Slice())
	}
	id := c.Args().First()
	if id != "" {
		if bad := validate.BackupID("ID", id); len(bad) > 0 {
			return usagef("backup status %q: %s", id, bad[0].Description)
		}
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		run, err := backupsOf(cl).GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: id})
		if err != nil {
			return backupRefusal("backup status", err)
		}
		return renderBackupRuns(e.stdout, e.output, []backupRunView{newBackupRunView(run)})
	})
}

// backupView is one backup in a destination.
type backupView struct {
	ID         string     `json:"id" yaml:"id"`
	Parent     string     `json:"parent,omitempty" yaml:"parent,omitempty"`
	Kind       string     `json:"kind,omitempty" yaml:"kind,omitempty"`
	CreatedAt  *time.Time `json:"created_at,omitempty" yaml:"created_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty" yaml:"finished_at,omitempty"`
	Shards     uint32     `json:"shards" yaml:"shards"`
	Messages   int64      `json:"messages" yaml:"messages"`
	Bytes      int64      `json:"bytes" yaml:"bytes"`
	ClusterID  string     `json:"cluster_id,omitempty" yaml:"cluster_id,omitempty"`
	// Status is complete, or unfinished for a backup without a manifest
	// (unfinished or failed: nothing else is known of it).
	Status string `json:"status" yaml:"status"`
}

// backupsView is the answer of backup list.
type backupsView struct {
	Dest    string       `json:"dest" yaml:"dest"`
	Backups []backupView `json:"backups" yaml:"backups"`
}

func newBackupsView(dest string, resp *sundialv1.ListBackupsResponse) backupsView {
	v := backupsView{Dest: dest, Backups: []backupView{}}
	for _, b := range resp.GetBackups() {
		v.Backups = append(v.Backups, backupView{
			ID: b.GetId(), Parent: b.GetParent(), Kind: b.GetKind(), CreatedAt: msTime(b.GetCreatedAtUnixMs()),
			FinishedAt: msTime(b.GetFinishedAtUnixMs()), Shards: b.GetShards(), Messages: b.GetMessages(), Bytes: b.GetBytes(),
			ClusterID: b.GetClusterId(), Status: "complete",
		})
	}
	for _, id := range resp.GetUnfinished() {
		v.Backups = append(v.Backups, backupView{ID: id, Status: "unfinished"})
	}
	return v
}

func renderBackups(w io.Writer, format string, v backupsView) error {
	return render(w, format, v, func(w io.Writer) {
		if len(v.Backups) == 0 {
			fmt.Fprintf(w, "no backups in %s\n", v.Dest)
			return
		}
		t := newTable(w, "ID", "PARENT", "KIND", "CREATED", "SHARDS", "MESSAGES", "BYTES", "STATUS")
		for _, b := range v.Backups {
			if b.Status == "unfinished" {
				t.AppendRow([]any{b.ID, "-", "-", "-", "-", "-", "-", b.Status})
				continue
			}
			t.AppendRow([]any{b.ID, orDash(b.Parent), b.Kind, timeOrDash(b.CreatedAt), b.Shards, b.Messages, humanBytes(b.Bytes), b.Status})
		}
		t.Render()
	})
}

func runBackupList(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup list"); err != nil {
		return err
	}
	dest, err := backupLocation(c, "dest")
	if err != nil {
		return err
	}
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: dest})
		if err != nil {
			return backupRefusal("backup list", err)
		}
		return renderBackups(e.stdout, e.output, newBackupsView(dest, resp))
	})
}

// verifyTimeout is the least time backup verify waits: every file of the
// backup and the backups it builds on is read back.
const verifyTimeout = time.Hour

// verifyView is the answer of backup verify.
type verifyView struct {
	Backup string   `json:"backup_id" yaml:"backup_id"`
	Chain  []string `json:"chain" yaml:"chain"`
	Files  uint32   `json:"files" yaml:"files"`
	Bytes  int64    `json:"bytes" yaml:"bytes"`
}

func runBackupVerify(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup verify"); err != nil {
		return err
	}
	dest, err := backupLocation(c, "dest")
	if err != nil {
		return err
	}
	id, err := backupIDFlag(c, true)
	if err != nil {
		return err
	}
	e.timeout = max(e.timeout, verifyTimeout)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: dest, BackupId: id})
		if err != nil {
			return backupRefusal("backup verify "+id, err)
		}
		v := verifyView{Backup: id, Chain: append([]string{}, resp.GetChain()...), Files: resp.GetFiles(), Bytes: resp.GetBytes()}
		return render(e.stdout, e.output, v, func(w io.Writer) {
			fmt.Fprintf(w, "backup %s verified: %d files, %s (chain %s)\n", v.Backup, v.Files, humanBytes(v.Bytes), strings.Join(v.Chain, " → "))
		})
	})
}

// deleteTimeout is the least time backup delete waits: a backup has a
// file per shard.
const deleteTimeout = 10 * time.Minute

// deleteView is the answer of backup delete.
type deleteView struct {
	Backup string `json:"backup_id" yaml:"backup_id"`
	Dest   string `json:"dest" yaml:"dest"`
	Files  uint32 `json:"files" yaml:"files"`
}

func runBackupDelete(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup delete"); err != nil {
		return err
	}
	dest, err := backupLocation(c, "dest")
	if err != nil {
		return err
	}
	id, err := backupIDFlag(c, true)
	if err != nil {
		return err
	}
	if err := confirm(c, e, fmt.Sprintf("delete backup %s from %s", id, dest)); err != nil {
		return err
	}
	e.timeout = max(e.timeout, deleteTimeout)
	return call(ctx, e, func(ctx context.Context, cl *client.Client) error {
		resp, err := backupsOf(cl).DeleteBackup(ctx, &sundialv1.DeleteBackupRequest{Dest: dest, BackupId: id})
		if err != nil {
			return backupRefusal("backup delete "+id, err)
		}
		v := deleteView{Backup: id, Dest: dest, Files: resp.GetFiles()}
		return render(e.stdout, e.output, v, func(w io.Writer) {
			fmt.Fprintf(w, "backup %s deleted from %s: %s\n", v.Backup, v.Dest, count(int(v.Files), "file"))
		})
	})
}
