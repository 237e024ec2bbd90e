package forward

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	"github.com/sundialmq/sundial/proxy/internal/routing"
)

// Long runs call against any broker, for a call that may run longer than
// the forward timeout (a backup waited for, a verify reading every file
// back, a restore's progress stream) or must not run twice. Brokers are
// tried in turn, as by Any, while again says the error of the failed
// attempt may be tried at the next broker, and no longer than the forward
// timeout from the call's start: an attempt that fails after that is the
// answer, and the error is codes.Unavailable naming the last one. An
// attempt runs until ctx ends, not the forward timeout. Once again says
// no, the error is the answer.
func (f *Forwarder) Long(ctx context.Context, again func(error) bool, call Call) error {
	search, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	backoff := MinBackoff
	last := status.Error(codes.Unavailable, "no broker address known")
	for {
		f.mu.Lock()
		addrs := routing.RotateAvoiding(f.brokerAddrs(), int(f.next.Add(1)), f.slow, time.Now())
		f.mu.Unlock()
		for _, addr := range addrs {
			err := f.attemptLong(ctx, addr, call)
			if err == nil {
				return nil
			}
			if ctx.Err() != nil || !again(err) {
				return sent(err)
			}
			f.metrics.retries.WithLabelValues(retryReason(err)).Inc()
			last = err
			if search.Err() != nil {
				break
			}
		}
		if !Sleep(search, backoff) {
			if errors.Is(ctx.Err(), context.Canceled) {
				return ctx.Err()
			}
			return status.Errorf(codes.Unavailable, "no broker reachable (last error: %v)", status.Convert(last).Message())
		}
		backoff = min(2*backoff, MaxBackoff)
	}
}

// OnceCall is one attempt of a call forwarded by Once: it passes opts to
// its RPC.
type OnceCall func(ctx context.Context, conn *grpc.ClientConn, opts ...grpc.CallOption) error

// Once is Long for a call that must reach one broker at most (one that
// changes something and is not idempotent: a backup started, files
// deleted): it moves to the next broker only while the call has reached
// none, that is when no connection to the broker tried could carry it (the
// broker is down or unreachable: the RPC never left the proxy). The answer
// of the broker the call reaches is the answer, whatever it is, even
// Unavailable: the call may have taken effect there.
func (f *Forwarder) Once(ctx context.Context, call OnceCall) error {
	return f.Long(ctx, unsent, func(ctx context.Context, conn *grpc.ClientConn) error {
		// gRPC fills p only once the RPC has a stream on a connection,
		// that is once the request may have been sent.
		var p peer.Peer
		err := call(ctx, conn, grpc.Peer(&p))
		if err != nil && p.Addr == nil {
			return &unsentError{err: err}
		}
		return err
	})
}

// attemptLong runs one attempt of Long at addr; an address the pool has no
// connection for is an unsent attempt.
func (f *Forwarder) attemptLong(ctx context.Context, addr string, call Call) error {
	conn, err := f.pool.Conn(addr)
	if err != nil {
		return &unsentError{err: status.Error(codes.Unavailable, err.Error())}
	}
	return call(ctx, conn)
}

// unsentError is the error of an attempt whose RPC never left the proxy:
// Long's again sees it, its caller the error inside.
type unsentError struct{ err error }

func (e *unsentError) Error() string { return e.err.Error() }
func (e *unsentError) Unwrap() error { return e.err }

// GRPCStatus is the status of the attempt's error.
func (e *unsentError) GRPCStatus() *status.Status { return status.Convert(e.err) }

// unsent says an attempt's RPC never left the proxy and another broker
// may be tried.
func unsent(err error) bool {
	var u *unsentError
	return errors.As(err, &u) && apierr.Classify(u.err) == apierr.Retry
}

// sent is err without the unsentError wrapper.
func sent(err error) error {
	var u *unsentError
	if errors.As(err, &u) {
		return u.err
	}
	return err
}
