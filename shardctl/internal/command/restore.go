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

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

func restoreCommand(act cli.ActionFunc) *cli.Command {
	return &cli.Command{
		Name:  "restore",
		Usage: "restore a backup (and the backups it builds on) into this cluster, which must be new: no topics, every shard empty",
		Description: "Every file is verified before anything is written; then each shard's records go through its\n" +
			"Raft log, and last the catalog (topics, groups, settings, tokens, roles). The cluster keeps its own\n" +
			"cluster id. Progress goes to stderr (a bar on a terminal), the summary to stdout. A restore cut\n" +
			"short (Ctrl-C, --wait-timeout, a broker lost) resumes when the same command runs again. Asks for\n" +
			"confirmation on a terminal; needs --yes otherwise.",
		Flags: []cli.Flag{
			locationFlag("src", "where the backup is"),
			backupFlag("the backup `ID` to restore (default: the newest complete one in --src)"),
			yesFlag(),
			noProgressFlag(),
			&cli.DurationFlag{Name: "wait-timeout", Value: 24 * time.Hour, Usage: "stop after `D` (run the command again to resume)"},
		},
		Action: act,
	}
}

// restoreView is the answer of backup restore.
type restoreView struct {
	Backup    string   `json:"backup_id" yaml:"backup_id"`
	Chain     []string `json:"chain" yaml:"chain"`
	Shards    uint32   `json:"shards" yaml:"shards"`
	Bytes     int64    `json:"bytes" yaml:"bytes"`
	Messages  int64    `json:"messages" yaml:"messages"`
	ClusterID string   `json:"cluster_id" yaml:"cluster_id"`
}

func renderRestore(w io.Writer, format string, v restoreView) error {
	return render(w, format, v, func(w io.Writer) {
		t := newTable(w, "BACKUP", "CHAIN", "SHARDS", "MESSAGES", "BYTES", "CLUSTER")
		t.AppendRow([]any{v.Backup, strings.Join(v.Chain, ","), v.Shards, v.Messages, humanBytes(v.Bytes), v.ClusterID})
		t.Render()
	})
}

func progressStep(p *sundialv1.RestoreProgress) step {
	return step{label: "restore " + p.GetBackupId(), phase: p.GetPhase(), shardsDone: p.GetShardsDone(), shardsTotal: p.GetShardsTotal(),
		bytesDone: p.GetBytesDone(), bytesTotal: p.GetBytesTotal()}
}

// resumeHint ends the message of a restore that stopped part way.
const resumeHint = "run the same command again to resume the restore"

func runBackupRestore(ctx context.Context, c *cli.Context, e *env) error {
	if err := noArgs(c, "backup restore"); err != nil {
		return err
	}
	src, err := backupLocation(c, "src")
	if err != nil {
		return err
	}
	id, err := backupIDFlag(c, false)
	if err != nil {
		return err
	}
	limit := c.Duration("wait-timeout")
	if limit <= 0 {
		return usagef("--wait-timeout %v: want a positive duration", limit)
	}
	what := "the newest backup"
	if id != "" {
		what = "backup " + id
	}
	if err := confirm(c, e, fmt.Sprintf("restore %s from %s into the cluster at %s", what, src, e.proxy)); err != nil {
		return err
	}
	cl, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer cl.Close()
	sctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	st, err := backupsOf(cl).RestoreBackup(sctx, &sundialv1.RestoreBackupRequest{Src: src, BackupId: id})
	if err != nil {
		return restoreStopped(ctx, limit, err)
	}
	m := newMeter(e, c.Bool("no-progress"))
	var last *sundialv1.RestoreProgress
	for {
		p, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			m.end(false)
			return restoreStopped(ctx, limit, err)
		}
		last = p
		m.show(progressStep(p))
	}
	done := last.GetPhase() == "done"
	m.end(done)
	if !done {
		return &silentError{msg: fmt.Sprintf("backup restore: the brokers' answer ended at phase %q, before done: %s", last.GetPhase(), resumeHint)}
	}
	return renderRestore(e.stdout, e.output, restoreView{
		Backup: last.GetBackupId(), Chain: append([]string{}, last.GetChain()...), Shards: last.GetShardsTotal(),
		Bytes: last.GetBytesTotal(), Messages: last.GetMessages(), ClusterID: last.GetClusterId(),
	})
}

// restoreStopped is the error of a restore stream that ended with err:
// one cut short (Ctrl-C, --wait-timeout, a broker or proxy lost) says how
// to resume it; a refusal says why (backupRefusal).
func restoreStopped(ctx context.Context, limit time.Duration, err error) error {
	switch {
	case ctx.Err() != nil:
		return &silentError{msg: "backup restore: stopped; " + resumeHint}
	case status.Code(err) == codes.DeadlineExceeded:
		return &silentError{msg: fmt.Sprintf("backup restore: stopped after --wait-timeout %v; %s", limit, resumeHint)}
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.Canceled, codes.Internal:
		return &silentError{msg: fmt.Sprintf("backup restore: %s: %s; %s", strings.ToLower(snake(status.Code(err))), status.Convert(err).Message(), resumeHint)}
	}
	return backupRefusal("backup restore", err)
}
