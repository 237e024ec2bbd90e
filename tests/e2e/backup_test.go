package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/tests/framework"
)

// backupClients are the calls the backup test makes, through a cluster's
// first proxy.
type backupClients struct {
	conn     *grpc.ClientConn
	backups  sundialv1.BackupsClient
	admin    sundialv1.AdminClient
	producer sundialv1.ProducerClient
	consumer sundialv1.ConsumerClient
}

func clientsOf(t *testing.T, c *framework.Cluster) backupClients {
	t.Helper()
	conn, err := c.DialProxy(c.Proxies[0].GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return backupClients{conn: conn, backups: sundialv1.NewBackupsClient(conn), admin: sundialv1.NewAdminClient(conn),
		producer: sundialv1.NewProducerClient(conn), consumer: sundialv1.NewConsumerClient(conn)}
}

// published is what the test published: id → payload and due time.
type published map[string]struct {
	payload string
	dueMs   int64
}

func (b backupClients) publish(ctx context.Context, t *testing.T, all published, msgs ...*sundialv1.Message) []string {
	t.Helper()
	var ids []string
	framework.WaitFor(t, 30*time.Second, func() error { //nolint:contextcheck // each try uses the test's ctx; WaitFor bounds the retries

		resp, err := b.producer.Publish(ctx, &sundialv1.PublishRequest{RequestId: fmt.Sprintf("bk-%d-%s", len(all), msgs[0].GetPayload()), Messages: msgs})
		if err != nil {
			return err
		}
		ids = ids[:0]
		for i, r := range resp.GetResults() {
			if r.GetError() != nil {
				return fmt.Errorf("message %d: %v", i, r.GetError())
			}
			ids = append(ids, r.GetMessageId())
			all[r.GetMessageId()] = struct {
				payload string
				dueMs   int64
			}{string(msgs[i].GetPayload()), r.GetDueAtUnixMs()}
		}
		return nil
	})
	return ids
}

func batch(prefix string, n int, delay time.Duration, keyed bool) []*sundialv1.Message {
	msgs := make([]*sundialv1.Message, n)
	for i := range msgs {
		msgs[i] = &sundialv1.Message{Topic: "bk", Payload: fmt.Appendf(nil, "%s-%d", prefix, i), DelayMs: delay.Milliseconds()}
		if keyed {
			msgs[i].Key = fmt.Sprintf("%s-key-%d", prefix, i)
		}
	}
	return msgs
}

// receive takes up to n deliveries of group, leased for visibility.
func (b backupClients) receive(ctx context.Context, group string, n int, visibility time.Duration) ([]*sundialv1.Delivery, error) {
	resp, err := b.consumer.Receive(ctx, &sundialv1.ReceiveRequest{Topic: "bk", Group: group, MaxMessages: int32(n), WaitMs: 1000, VisibilityTimeoutMs: visibility.Milliseconds()})
	return resp.GetDeliveries(), err
}

// backup makes a backup to dest and waits until it is done.
func (b backupClients) backup(ctx context.Context, t *testing.T, dest string, incremental bool) *sundialv1.BackupRun {
	t.Helper()
	run, err := b.backups.CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: dest, Incremental: incremental, Wait: true})
	if err != nil {
		t.Fatalf("CreateBackup(%s, incremental %v) = %v", dest, incremental, err)
	}
	if run.GetStatus() != sundialv1.BackupStatus_BACKUP_STATUS_DONE {
		t.Fatalf("CreateBackup(%s, incremental %v) = %v, want done", dest, incremental, run)
	}
	return run
}

// restore restores backup id from src and answers the last frame.
func (b backupClients) restore(ctx context.Context, src, id string) (*sundialv1.RestoreProgress, error) {
	stream, err := b.backups.RestoreBackup(ctx, &sundialv1.RestoreBackupRequest{Src: src, BackupId: id})
	if err != nil {
		return nil, err
	}
	var last *sundialv1.RestoreProgress
	for {
		p, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return last, nil
		}
		if err != nil {
			return last, err
		}
		last = p
	}
}

// TestBackupAndRestoreIntoANewCluster: messages of every kind (due and
// long delayed, keyed, leased, of two groups, acked after the full backup)
// survive a full backup, an incremental one, the loss of every broker and
// a restore into a new cluster of another size: same ids and payloads,
// nothing before its due time, leases given up, acks kept, keys still
// deduplicating. A restore is refused into a cluster that holds data, and
// from a backup with an altered file (named) before anything is written.
func TestBackupAndRestoreIntoANewCluster(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	dir := t.TempDir()
	dest := "file://" + dir

	src := framework.NewCluster(t, framework.Config{Brokers: 3, Shards: 4})
	a := clientsOf(t, src)
	if _, err := a.admin.CreateTopic(ctx, &sundialv1.CreateTopicRequest{Topic: &sundialv1.Topic{Name: "bk", Partitions: 4, Groups: []string{"billing"}}}); err != nil {
		t.Fatalf("CreateTopic(bk) = %v", err)
	}
	all := published{}
	due := a.publish(ctx, t, all, batch("due", 30, 0, false)...)
	later := a.publish(ctx, t, all, batch("later", 10, 40*time.Second, false)...)
	keyed := a.publish(ctx, t, all, batch("keyed", 10, time.Hour, true)...)
	// Leased in group default at backup time, for 5 minutes: the restore
	// gives them up.
	var leased []*sundialv1.Delivery
	framework.WaitFor(t, 30*time.Second, func() error {
		d, err := a.receive(ctx, "default", 10-len(leased), 5*time.Minute)
		leased = append(leased, d...)
		if err == nil && len(leased) < 10 {
			err = fmt.Errorf("%d of 10 leased", len(leased))
		}
		return err
	})
	full := a.backup(ctx, t, dest, false)

	after := a.publish(ctx, t, all, batch("after", 20, 0, false)...)
	acked := map[string]bool{}
	for _, d := range leased[:5] {
		if _, err := a.consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{d.GetReceipt()}}); err != nil {
			t.Fatalf("Ack(%s) = %v", d.GetMessageId(), err)
		}
		acked[d.GetMessageId()] = true
	}
	incr := a.backup(ctx, t, dest, true)
	if incr.GetKind() != "incremental" || incr.GetParent() != full.GetId() {
		t.Fatalf("second backup = %v, want an incremental one on %s", incr, full.GetId())
	}
	list, err := a.backups.ListBackups(ctx, &sundialv1.ListBackupsRequest{Dest: dest})
	if err != nil || len(list.GetBackups()) != 2 || list.GetBackups()[1].GetBytes() >= list.GetBackups()[0].GetBytes() {
		t.Fatalf("ListBackups = %v, %v; want the full backup and a smaller incremental one", list, err)
	}
	if _, err := a.backups.VerifyBackup(ctx, &sundialv1.VerifyBackupRequest{Dest: dest, BackupId: incr.GetId()}); err != nil {
		t.Fatalf("VerifyBackup(%s) = %v", incr.GetId(), err)
	}
	src.Stop()

	// A copy of the backups with one byte of a shard file altered.
	bad := t.TempDir()
	if err := os.CopyFS(bad, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	altered := filepath.Join("backups", full.GetId(), fmt.Sprintf("shard-%d.sdb", firstShard(t, dir, full.GetId())))
	flipByte(t, filepath.Join(bad, altered))

	dst := framework.NewCluster(t, framework.Config{Brokers: 1, Shards: 4})
	b := clientsOf(t, dst)
	_, err = b.restore(ctx, "file://"+bad, incr.GetId())
	if grpcstatus.Code(err) != codes.DataLoss || !strings.Contains(grpcstatus.Convert(err).Message(), filepath.Base(altered)) {
		t.Fatalf("restore with %s altered = %v, want DataLoss naming it", altered, err)
	}
	if topics, err := b.admin.ListTopics(ctx, &sundialv1.ListTopicsRequest{}); err != nil || len(topics.GetTopics()) != 0 {
		t.Fatalf("topics after a refused restore = %v, %v; want none", topics, err)
	}
	last, err := b.restore(ctx, dest, incr.GetId())
	if err != nil || last.GetPhase() != "done" || last.GetShardsDone() != 4 {
		t.Fatalf("restore = %v, %v; want done with 4 shards", last, err)
	}
	if again, err := b.restore(ctx, dest, incr.GetId()); err != nil || again.GetPhase() != "done" {
		t.Fatalf("the same restore again = %v, %v; want done", again, err)
	}
	if _, err := b.restore(ctx, dest, full.GetId()); grpcstatus.Code(err) != codes.FailedPrecondition {
		t.Fatalf("another restore into the restored cluster = %v, want FailedPrecondition", err)
	}
	topic, err := b.admin.GetTopic(ctx, &sundialv1.GetTopicRequest{Name: "bk"})
	if err != nil || topic.GetPartitions() != 4 || !containsAll(topic.GetGroups(), "default", "billing") {
		t.Fatalf("GetTopic(bk) after restore = %v, %v; want 4 partitions and groups default, billing", topic, err)
	}

	// A keyed message is still pending under its key: publishing the key
	// again (IGNORE) answers the first id.
	again := b.publish(ctx, t, published{}, batch("keyed", 1, time.Hour, true)...)
	if again[0] != keyed[0] {
		t.Fatalf("publishing key keyed-key-0 again = %s, want the restored %s", again[0], keyed[0])
	}

	// Every message due comes, once per group, with its id and payload,
	// never before its due time; the acked ones do not come to default.
	want := map[string][]string{"default": {}, "billing": {}}
	for _, id := range append(append(append([]string{}, due...), later...), after...) {
		want["billing"] = append(want["billing"], id)
		if !acked[id] {
			want["default"] = append(want["default"], id)
		}
	}
	for group, ids := range want {
		got := map[string]bool{}
		framework.WaitFor(t, 3*time.Minute, func() error {
			ds, err := b.receive(ctx, group, 100, time.Minute)
			for _, d := range ds {
				p, ok := all[d.GetMessageId()]
				now := time.Now().UnixMilli()
				switch {
				case !ok || p.payload != string(d.GetPayload()):
					t.Fatalf("group %s got %s %q, not a published message", group, d.GetMessageId(), d.GetPayload())
				case d.GetDueAtUnixMs() != p.dueMs || now < p.dueMs:
					t.Fatalf("group %s got %s due %d at %d, published due %d: early or moved", group, d.GetMessageId(), d.GetDueAtUnixMs(), now, p.dueMs)
				case group == "default" && acked[d.GetMessageId()]:
					t.Fatalf("group default got %s, acked before the incremental backup", d.GetMessageId())
				}
				got[d.GetMessageId()] = true
				if _, err := b.consumer.Ack(ctx, &sundialv1.AckRequest{Receipts: []string{d.GetReceipt()}}); err != nil {
					return err
				}
			}
			if err != nil {
				return err
			}
			if len(got) < len(ids) {
				return fmt.Errorf("group %s: %d of %d messages", group, len(got), len(ids))
			}
			return nil
		})
		for _, id := range ids {
			if !got[id] {
				t.Errorf("group %s never got %s", group, id)
			}
		}
	}
}

func containsAll(have []string, want ...string) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// firstShard is the lowest shard id with a file in backup id.
func firstShard(t *testing.T, dir, id string) uint64 {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(dir, "backups", id, "shard-*.sdb"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("no shard files in backup %s (%v)", id, err)
	}
	var shard uint64
	if _, err := fmt.Sscanf(filepath.Base(matches[0]), "shard-%d.sdb", &shard); err != nil {
		t.Fatalf("shard file %s: %v", matches[0], err)
	}
	return shard
}

func flipByte(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
