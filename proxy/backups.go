package proxy

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
	"github.com/sundialmq/sundial/proto/validate"
)

// backups serves the Backups service (docs/operations.md, "Backups"). The
// proxy checks each request's shape (validate) and forwards it to any
// broker, which asks the meta leader (runs) or reads the destination
// itself (listings, verify, delete, restore):
//   - GetBackupRun, ListBackupRuns, ListBackups and GetBackupSchedule only
//     read: readAnyBroker. SetBackupSchedule is idempotent: anyBroker.
//   - CreateBackup, DeleteBackup and VerifyBackup go through forward.Once:
//     to another broker only while no broker has received the call. A second
//     try after one reached a broker could answer for the first (a create
//     FailedPrecondition naming the backup the first started, a delete
//     NotFound for the files the first deleted), and a verify reads every
//     file back: the caller decides. A create that waits, a verify and a
//     delete run until the caller's deadline, not the forward timeout.
//   - RestoreBackup relays one broker's progress stream, every frame until
//     it ends. A broker that fails with a Retry error before its first frame
//     is left for the next (a restore resumes when asked again); after a
//     frame, the error is the answer.
type backups struct {
	sundialv1.UnimplementedBackupsServer
	s *Server
}

func backupsCall[Req, Resp any](m func(sundialv1.BackupsClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) func(*grpc.ClientConn, context.Context, Req) (Resp, error) {
	return func(conn *grpc.ClientConn, ctx context.Context, req Req) (Resp, error) {
		return m(sundialv1.NewBackupsClient(conn), ctx, req)
	}
}

// onceBroker runs a Backups call that must reach one broker at most
// (forward.Forwarder.Once).
func onceBroker[Req, Resp any](ctx context.Context, s *Server, req Req, m func(sundialv1.BackupsClient, context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, error) {
	var resp Resp
	err := s.fwd.Once(ctx, func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error {
		var err error
		resp, err = m(sundialv1.NewBackupsClient(conn), ctx, req, opts...)
		return err
	})
	return resp, err
}

// CreateBackup checks dest and asks a broker to start the run. Without
// wait the call has the forward timeout; with wait, the caller's deadline
// less a margin, so the run the broker answers when the deadline nears
// reaches the caller.
func (b backups) CreateBackup(ctx context.Context, req *sundialv1.CreateBackupRequest) (*sundialv1.BackupRun, error) {
	if bad := validate.CreateBackup(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	var cancel context.CancelFunc
	if req.GetWait() {
		ctx, cancel = answerEarly(ctx)
	} else {
		ctx, cancel = context.WithTimeout(ctx, b.s.cfg.ForwardTimeout)
	}
	defer cancel()
	run, err := onceBroker(ctx, b.s, req, sundialv1.BackupsClient.CreateBackup)
	if req.GetWait() && status.Code(err) == codes.DeadlineExceeded {
		return nil, status.Errorf(codes.DeadlineExceeded, "the wait ran out; a backup that started goes on (GetBackupRun follows it): %s", status.Convert(err).Message())
	}
	return run, err
}

// GetBackupRun checks the id and forwards to any broker.
func (b backups) GetBackupRun(ctx context.Context, req *sundialv1.GetBackupRunRequest) (*sundialv1.BackupRun, error) {
	if bad := validate.GetBackupRun(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return readAnyBroker(ctx, b.s, req, backupsCall(sundialv1.BackupsClient.GetBackupRun))
}

// ListBackupRuns forwards to any broker.
func (b backups) ListBackupRuns(ctx context.Context, req *sundialv1.ListBackupRunsRequest) (*sundialv1.ListBackupRunsResponse, error) {
	return readAnyBroker(ctx, b.s, req, backupsCall(sundialv1.BackupsClient.ListBackupRuns))
}

// ListBackups checks dest and forwards to any broker.
func (b backups) ListBackups(ctx context.Context, req *sundialv1.ListBackupsRequest) (*sundialv1.ListBackupsResponse, error) {
	if bad := validate.ListBackups(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return readAnyBroker(ctx, b.s, req, backupsCall(sundialv1.BackupsClient.ListBackups))
}

// VerifyBackup checks the request and forwards it to one broker.
func (b backups) VerifyBackup(ctx context.Context, req *sundialv1.VerifyBackupRequest) (*sundialv1.VerifyBackupResponse, error) {
	if bad := validate.VerifyBackup(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return onceBroker(ctx, b.s, req, sundialv1.BackupsClient.VerifyBackup)
}

// DeleteBackup checks the request and forwards it to one broker.
func (b backups) DeleteBackup(ctx context.Context, req *sundialv1.DeleteBackupRequest) (*sundialv1.DeleteBackupResponse, error) {
	if bad := validate.DeleteBackup(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return onceBroker(ctx, b.s, req, sundialv1.BackupsClient.DeleteBackup)
}

// SetBackupSchedule checks the schedule and forwards it to any broker
// (setting the same schedule twice is setting it once).
func (b backups) SetBackupSchedule(ctx context.Context, req *sundialv1.SetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	if bad := validate.SetBackupSchedule(req); len(bad) > 0 {
		return nil, apierr.InvalidArgument(bad...)
	}
	return anyBroker(ctx, b.s, req, backupsCall(sundialv1.BackupsClient.SetBackupSchedule))
}

// GetBackupSchedule forwards to any broker.
func (b backups) GetBackupSchedule(ctx context.Context, req *sundialv1.GetBackupScheduleRequest) (*sundialv1.BackupSchedule, error) {
	return readAnyBroker(ctx, b.s, req, backupsCall(sundialv1.BackupsClient.GetBackupSchedule))
}

// RestoreBackup checks the request and relays a broker's progress stream
// until it ends (see backups).
func (b backups) RestoreBackup(req *sundialv1.RestoreBackupRequest, stream grpc.ServerStreamingServer[sundialv1.RestoreProgress]) error {
	if bad := validate.RestoreBackup(req); len(bad) > 0 {
		return apierr.InvalidArgument(bad...)
	}
	relayed := false // a broker sent a frame; the Long call's attempts run one at a time
	again := func(err error) bool { return !relayed && apierr.Classify(err) == apierr.Retry }
	return b.s.fwd.Long(stream.Context(), again, func(ctx context.Context, conn *grpc.ClientConn) error {
		from, err := sundialv1.NewBackupsClient(conn).RestoreBackup(ctx, req)
		if err != nil {
			return err
		}
		for {
			p, err := from.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			relayed = true
			if err := stream.Send(p); err != nil {
				return err
			}
		}
	})
}
