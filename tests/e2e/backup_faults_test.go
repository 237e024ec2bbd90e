package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

// TestBackupToS3AndRestore: the whole cycle against a real S3 protocol
// server on loopback (gofakes3 in this process), the brokers reading their
// keys from a credentials file: a full and an incremental backup, then a
// restore into a new cluster that delivers every message.
func TestBackupToS3AndRestore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	backend := s3mem.New()
	if err := backend.CreateBucket("sundial-backups"); err != nil {
		t.Fatal(err)
	}
	s3 := httptest.NewServer(gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	defer s3.Close()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = test-key\naws_secret_access_key = test-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	dest := "s3://sundial-backups/cluster-a?endpoint=" + strings.TrimPrefix(s3.URL, "http://") + "&tls=false"
	args := []string{"--backup-credentials-file", creds}

	src := framework.NewCluster(t, framework.Config{Brokers: 3, Shards: 2, BrokerArgs: args})
	a := clientsOf(t, src)
	if _, err := a.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "bk", Partitions: 2}}); err != nil {
		t.Fatalf("CreateTopic(bk) = %v", err)
	}
	all := published{}
	ids := a.publish(ctx, t, all, batch("first", 40, 0, false)...)
	a.backup(ctx, t, dest, false)
	ids = append(ids, a.publish(ctx, t, all, batch("second", 20, 0, false)...)...)
	incr := a.backup(ctx, t, dest, true)
	src.Stop()

	dst := framework.NewCluster(t, framework.Config{Brokers: 1, Shards: 2, BrokerArgs: args})
	b := clientsOf(t, dst)
	if last, err := b.restore(ctx, dest, ""); err != nil || last.GetPhase() != "done" || last.GetBackupId() != incr.GetId() {
		t.Fatalf("restore of the newest backup in %s = %v, %v; want done restoring %s", dest, last, err, incr.GetId())
	}
	got := map[string]bool{}
	framework.WaitFor(t, 2*time.Minute, func() error {
		ds, err := b.receive(ctx, "default", 100, time.Minute)
		for _, d := range ds {
			if p, ok := all[d.GetMessageId()]; !ok || p.payload != string(d.GetPayload()) {
				t.Fatalf("got %s %q, not a published message", d.GetMessageId(), d.GetPayload())
			}
			got[d.GetMessageId()] = true
		}
		if err == nil && len(got) < len(ids) {
			err = fmt.Errorf("%d of %d messages", len(got), len(ids))
		}
		return err
	})
}

// TestBackupThroughBrokerKills: a backup whose meta leader is killed as it
// starts, and a shard leader killed while it runs, ends either
// done — and then every file reads back as the manifest says — or failed
// without a manifest; never a manifest over missing or wrong files. A
// backup after the brokers are back is done.
func TestBackupThroughBrokerKills(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dest := "file://" + t.TempDir()
	c := framework.NewCluster(t, framework.Config{Brokers: 3, Shards: 4})
	a := clientsOf(t, c)
	if _, err := a.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "bk", Partitions: 4}}); err != nil {
		t.Fatalf("CreateTopic(bk) = %v", err)
	}
	all := published{}
	for i := range 20 {
		a.publish(ctx, t, all, batch(fmt.Sprintf("m%d", i), 200, time.Hour, false)...)
	}
	info, err := c.ClusterInfo()
	if err != nil {
		t.Fatal(err)
	}
	metaLeader := int(info.GetMetaLeaderNodeId())
	// The clients stay on a broker that is not killed.
	other := 1 + metaLeader%3
	run, err := backupsOn(t, c, other).CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: dest})
	if err != nil {
		t.Fatalf("CreateBackup = %v", err)
	}
	if err := c.Kill(metaLeader); err != nil {
		t.Fatal(err)
	}
	bk := backupsOn(t, c, other)
	// Once a new meta leader answers, the old one comes back and the
	// leader of a shard is killed (one broker down at a time: the meta
	// group keeps its quorum).
	framework.WaitFor(t, time.Minute, func() error {
		_, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: run.GetId()})
		return err
	})
	if err := c.Restart(metaLeader); err != nil {
		t.Fatal(err)
	}
	shards, err := c.ShardIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var killed []int
	for _, shard := range shards {
		if l, err := c.LeaderOf(shard); err == nil && l != other {
			if err := c.Kill(l); err != nil {
				t.Fatal(err)
			}
			killed = append(killed, l)
			break
		}
	}
	var end *sundialv1.BackupRun
	framework.WaitFor(t, 4*time.Minute, func() error {
		r, err := bk.GetBackupRun(ctx, &sundialv1.GetBackupRunRequest{Id: run.GetId()})
		if err != nil {
			return err
		}
		if r.GetStatus() == sundialv1.BackupStatus_BACKUP_STATUS_RUNNING {
			return fmt.Errorf("backup %s running: %d of %d shards (%s)", r.GetId(), r.GetShardsDone(), r.GetShardsTotal(), r.GetError())
		}
		end = r
		return nil
	})
	for _, id := range killed {
		if err := c.Restart(id); err != nil {
			t.Fatal(err)
		}
	}
	list, err := bk.ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: dest})
	if err != nil {
		t.Fatal(err)
	}
	listed := slices.ContainsFunc(list.GetBackups(), func(b *sundialv1.BackupInfo) bool { return b.GetId() == run.GetId() })
	switch end.GetStatus() {
	case sundialv1.BackupStatus_BACKUP_STATUS_DONE:
		if !listed {
			t.Fatalf("backup %s done but not listed in %s: %v", run.GetId(), dest, list)
		}
		if _, err := bk.VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: dest, BackupId: run.GetId()}); err != nil {
			t.Fatalf("VerifyBackup(%s) after the kills = %v", run.GetId(), err)
		}
		t.Logf("backup %s resumed through the kills and verified", run.GetId())
	default:
		if listed {
			t.Fatalf("backup %s ended %v (%s) but has a manifest", run.GetId(), end.GetStatus(), end.GetError())
		}
		t.Logf("backup %s failed without a manifest: %s", run.GetId(), end.GetError())
	}
	framework.WaitFor(t, 2*time.Minute, func() error {
		r, err := bk.CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: dest, Wait: true})
		if err == nil && r.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_DONE {
			err = fmt.Errorf("backup after the restarts: %v", r)
		}
		return err
	})
}

// backupsOn is a Backups client of broker id.
func backupsOn(t *testing.T, c *framework.Cluster, id int) sundialv1.BackupsClient {
	t.Helper()
	conn, err := c.DialProxy(c.Brokers[id-1].GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return sundialv1.NewBackupsClient(conn)
}
