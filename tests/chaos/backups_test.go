package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/sundialmq/sundial/proc"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

// backupEvery is how often the chaos run starts a backup, under whatever
// fault holds then.
const backupEvery = 30 * time.Second

// takeBackups starts a backup into dest every backupEvery until ctx ends
// (full first, then incremental on the newest done one), as `shardctl
// backup create` would, and answers the ids of the runs it started. A
// start refused (a run still going, a proxy or meta leader down) is
// logged and tried at the next tick.
func takeBackups(ctx context.Context, c *framework.Cluster, dest string, logf func(string, ...any)) []string {
	var ids []string
	t := time.NewTicker(backupEvery)
	defer t.Stop()
	incremental := false
	for {
		select {
		case <-ctx.Done():
			return ids
		case <-t.C:
		}
		bk, done, err := backupsClient(c)
		if err != nil {
			logf("backup: %v", err)
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		run, err := bk.CreateBackup(cctx, &sundialv1.CreateBackupRequest{Dest: dest, Incremental: incremental})
		cancel()
		done()
		if err != nil {
			logf("backup: not started: %v", err)
			continue
		}
		logf("backup: %s %s started", run.GetKind(), run.GetId())
		ids = append(ids, run.GetId())
		incremental = true
	}
}

func backupsClient(c *framework.Cluster) (sundialv1.BackupsClient, func(), error) {
	addrs := c.ProxyAddrs()
	if len(addrs) == 0 {
		return nil, nil, fmt.Errorf("no proxy")
	}
	conn, err := c.DialProxy(addrs[0])
	if err != nil {
		return nil, nil, err
	}
	return sundialv1.NewBackupsClient(conn), func() { conn.Close() }, nil
}

// checkBackups waits (after the faults) until none of the runs ids runs,
// then checks what a backup promises under faults: every run ended done
// or failed; a done run is listed in dest with its manifest and every
// file reads back as the manifest says; a failed run has no manifest.
func checkBackups(c *framework.Cluster, dest string, ids []string) (string, error) {
	if len(ids) == 0 {
		return "no backup started", nil
	}
	bk, done, err := backupsClient(c)
	if err != nil {
		return "", err
	}
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ends := map[string]*sundialv1.BackupRun{}
	if err := proc.Poll(4*time.Minute, func() error {
		for _, id := range ids {
			if ends[id] != nil {
				continue
			}
			r, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: id})
			if err != nil {
				return err
			}
			if r.GetStatus() == sundialv1.BackupStatus_BACKUP_STATUS_RUNNING {
				return fmt.Errorf("backup %s still running: %d of %d shards (%s)", id, r.GetShardsDone(), r.GetShardsTotal(), r.GetError())
			}
			ends[id] = r
		}
		return nil
	}); err != nil {
		return "", err
	}
	list, err := bk.ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: dest})
	if err != nil {
		return "", err
	}
	var doneN, failedN int
	for _, id := range ids {
		r := ends[id]
		listed := slices.ContainsFunc(list.GetBackups(), func(b *sundialv1.BackupInfo) bool { return b.GetId() == id })
		switch r.GetStatus() {
		case sundialv1.BackupStatus_BACKUP_STATUS_DONE:
			doneN++
			if !listed {
				return "", fmt.Errorf("backup %s done but has no manifest in %s", id, dest)
			}
			if _, err := bk.VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: dest, BackupId: id}); err != nil {
				return "", fmt.Errorf("backup %s done but does not verify: %w", id, err)
			}
		default:
			failedN++
			if listed {
				return "", fmt.Errorf("backup %s ended %v (%s) with a manifest", id, r.GetStatus(), r.GetError())
			}
		}
	}
	return fmt.Sprintf("%d backups done and verified, %d failed without a manifest", doneN, failedN), nil
}
