package target

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/loadtest/internal/cluster"
	"github.com/sundialmq/sundial/loadtest/internal/scenario"
	"github.com/sundialmq/sundial/proto/client"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// The Sundial target backs up and restores through the proxy's Backups
// service, as shardctl does. A cluster with TLS and tokens (sundial-tls)
// is not backed up: the backup figures are of the plaintext cluster.

var errBackupTLS = errors.New("target: sundial: backups are measured on the plaintext cluster only")

// dialProxy connects to the proxy's gRPC address, in plaintext.
func dialProxy(cl *cluster.Cluster) (*grpc.ClientConn, error) {
	if cl.ClientTLS() != nil {
		return nil, errBackupTLS
	}
	return grpc.NewClient(cl.ProxyAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Backup takes a backup with wait and answers it as the run reports it.
func (s *sundial) Backup(ctx context.Context, dest string, incremental bool) (scenario.BackupTaken, error) {
	conn, err := dialProxy(s.cl)
	if err != nil {
		return scenario.BackupTaken{}, err
	}
	defer conn.Close()
	run, err := sundialv1.NewBackupsClient(conn).CreateBackup(ctx, &sundialv1.CreateBackupRequest{Dest: dest, Incremental: incremental, Wait: true})
	if err != nil {
		return scenario.BackupTaken{}, err
	}
	t := scenario.BackupTaken{ID: run.GetId(), Kind: run.GetKind(), Bytes: run.GetBytes(), Messages: run.GetMessages()}
	if run.GetFinishedAtUnixMs() > 0 {
		t.RunTime = time.Duration(run.GetFinishedAtUnixMs()-run.GetStartedAtUnixMs()) * time.Millisecond
	}
	switch run.GetStatus() {
	case sundialv1.BackupStatus_BACKUP_STATUS_DONE:
		return t, nil
	case sundialv1.BackupStatus_BACKUP_STATUS_FAILED:
		return t, fmt.Errorf("target: sundial: backup %s failed: %s", run.GetId(), run.GetError())
	}
	return t, fmt.Errorf("target: sundial: backup %s not done when the call ended (%s, %d of %d shards)", run.GetId(), run.GetStatus(), run.GetShardsDone(), run.GetShardsTotal())
}

// Pending is the pending count of the topic's default group.
func (s *sundial) Pending(ctx context.Context) (int64, error) { return pending(ctx, s.c, s.topic) }

// pending sums the default group's scheduled, ready and in-flight copies
// of topic.
func pending(ctx context.Context, c *client.Client, topic string) (int64, error) {
	t, err := c.Admin().GetTopic(ctx, &sundialv1.GetTopicRequest{Name: topic})
	if err != nil {
		return 0, err
	}
	for _, g := range t.GetStats() {
		if g.GetGroup() == "default" {
			return g.GetScheduled() + g.GetReady() + g.GetInFlight(), nil
		}
	}
	return 0, fmt.Errorf("target: sundial: topic %s has no stats of group default", topic)
}

// NewEmpty starts a new cluster of the same shape, with no topic, in
// <data dir>-restore.
func (s *sundial) NewEmpty(ctx context.Context) (scenario.RestoreTarget, error) {
	if s.cl.ClientTLS() != nil {
		return nil, errBackupTLS
	}
	cl, err := s.cl.StartEmpty(ctx, s.cl.DataDir()+"-restore")
	if err != nil {
		return nil, err
	}
	c, err := client.Dial(ctx, []string{cl.ProxyAddr()}, client.WithAttemptTimeout(10*time.Second))
	if err != nil {
		return nil, errors.Join(err, cl.Stop())
	}
	return &sundialRestore{cl: cl, c: c, topic: s.topic}, nil
}

// sundialRestore is a new cluster a backup is restored into.
type sundialRestore struct {
	cl    *cluster.Cluster
	c     *client.Client
	topic string
}

// Restore streams a restore to its end. The new cluster's leaders may
// still be electing: a call refused as Unavailable before its first frame
// is made again, for up to a minute.
func (r *sundialRestore) Restore(ctx context.Context, src, id string) (int64, error) {
	conn, err := dialProxy(r.cl)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	bc := sundialv1.NewBackupsClient(conn)
	giveUp := time.Now().Add(time.Minute)
	for {
		last, err := restoreOnce(ctx, bc, src, id)
		switch {
		case last == nil && status.Code(err) == codes.Unavailable && time.Now().Before(giveUp):
			pause(ctx, 500*time.Millisecond)
			continue
		case err != nil:
			return last.GetMessages(), err
		case last.GetPhase() != "done":
			return last.GetMessages(), fmt.Errorf("target: sundial: restore of %s ended at phase %q", id, last.GetPhase())
		}
		return last.GetMessages(), nil
	}
}

// restoreOnce makes one RestoreBackup call and answers its last frame.
func restoreOnce(ctx context.Context, bc sundialv1.BackupsClient, src, id string) (*sundialv1.RestoreProgress, error) {
	stream, err := bc.RestoreBackup(ctx, &sundialv1.RestoreBackupRequest{Src: src, BackupId: id})
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

func (r *sundialRestore) Pending(ctx context.Context) (int64, error) {
	return pending(ctx, r.c, r.topic)
}

func (r *sundialRestore) Close() error { return errors.Join(r.c.Close(), r.cl.Stop()) }
