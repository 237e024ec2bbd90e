package apierr

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Class is what a caller may do after a failed call. Classify is the one
// retry classifier of Sundial: the SDK's publisher and subscriber, the
// proxy's forwarder and its shard subscriber all decide with it.
type Class int

const (
	// Permanent means the same request fails again (bad argument, unknown topic,
	// not allowed, too large). The error is the answer.
	Permanent Class = iota
	// Retry means the request was refused by a server that cannot serve it now
	// (unavailable, not the leader, not hosting the shard, aborted, asked
	// to come back later). Send it again after a backoff, at another
	// replica or the named leader.
	Retry
	// Unknown means the request may or may not have taken effect (deadline
	// exceeded, cancelled, an internal or unknown error). Repeat it only
	// if it is idempotent: a publish with its request id, an ack, a
	// subscription stream; never a Receive, which leases messages.
	Unknown
)

// String names the class for logs.
func (c Class) String() string {
	switch c {
	case Retry:
		return "retry"
	case Unknown:
		return "unknown"
	default:
		return "permanent"
	}
}

// Classify sorts err by its gRPC status code and typed details, never by
// its text; wrapped errors are unwrapped. context.Canceled and
// context.DeadlineExceeded are Unknown (the caller checks its own context
// first). ResourceExhausted is Permanent (a message over the size limit
// stays over it) unless the status carries a RetryInfo detail. A nil error
// is Permanent: there is nothing to retry.
func Classify(err error) Class {
	if err == nil {
		return Permanent
	}
	if _, ok := AsNotLeader(err); ok {
		return Retry
	}
	if _, ok := AsWrongShard(err); ok {
		return Retry
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return Unknown
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted:
		return Retry
	case codes.ResourceExhausted:
		if _, ok := detail[*errdetails.RetryInfo](err); ok {
			return Retry
		}
		return Permanent
	case codes.DeadlineExceeded, codes.Canceled, codes.Internal, codes.Unknown:
		return Unknown
	}
	return Permanent
}

// RetryDelay is how long the server asked the caller to wait before
// sending again (a RetryInfo detail, as a rate limit answers), 0 if it
// did not say.
func RetryDelay(err error) time.Duration {
	ri, ok := detail[*errdetails.RetryInfo](err)
	if !ok || ri.GetRetryDelay() == nil {
		return 0
	}
	return max(ri.GetRetryDelay().AsDuration(), 0)
}

// Retryable reports whether a call that failed with err may be sent again:
// for a Retry error always, for an Unknown one only when the call is
// idempotent.
func Retryable(err error, idempotent bool) bool {
	switch Classify(err) {
	case Retry:
		return true
	case Unknown:
		return idempotent
	}
	return false
}
