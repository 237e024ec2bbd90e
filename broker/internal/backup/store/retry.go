package store

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how Retrying tries an operation again.
type RetryPolicy struct {
	// Attempts is how many times an operation is tried in all. Default: 5.
	Attempts int
	// Initial is the wait before the first retry, doubled for each
	// following one up to Max; each wait is drawn between half of it and
	// all of it. Defaults: 200ms and 5s.
	Initial, Max time.Duration
}

// DefaultRetryPolicy answers the policy Retrying uses for unset fields.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{Attempts: 5, Initial: 200 * time.Millisecond, Max: 5 * time.Second}
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	d := DefaultRetryPolicy()
	if p.Attempts <= 0 {
		p.Attempts = d.Attempts
	}
	if p.Initial <= 0 {
		p.Initial = d.Initial
	}
	if p.Max <= 0 {
		p.Max = d.Max
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	return p
}

// wait answers the wait after the given failed attempt (1 for the first).
func (p RetryPolicy) wait(attempt int) time.Duration {
	d := p.Initial
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// Retrying wraps s so that Put, Open, List and Delete are tried again, up
// to p.Attempts in all, when they fail for a reason that may pass: not a
// missing object, a cancelled or expired context, denied access, a missing
// bucket or a bad name. onRetry, when not nil, is told of each failure
// that will be retried (op is "put", "open", "list" or "delete"; name is
// the prefix for "list"; attempt counts from 1). Put seeks its reader back
// to the start before each try. Zero fields of p take their defaults
// (DefaultRetryPolicy).
func Retrying(s Store, p RetryPolicy, onRetry func(op, name string, attempt int, err error)) Store {
	return &retrying{s: s, p: p.withDefaults(), onRetry: onRetry}
}

type retrying struct {
	s       Store
	p       RetryPolicy
	onRetry func(op, name string, attempt int, err error)
}

func (r *retrying) String() string { return r.s.String() }

// do runs f until it succeeds, fails permanently, runs out of attempts or
// ctx ends; it answers f's last error (wrapped with ctx's when ctx ended
// during a wait).
func (r *retrying) do(ctx context.Context, op, name string, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt >= r.p.Attempts || permanent(err) || ctx.Err() != nil {
			return err
		}
		if r.onRetry != nil {
			r.onRetry(op, name, attempt, err)
		}
		t := time.NewTimer(r.p.wait(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w; the last try failed: %w", ctx.Err(), err)
		case <-t.C:
		}
	}
}

func (r *retrying) Put(ctx context.Context, name string, body io.ReadSeeker, size int64) error {
	return r.do(ctx, "put", name, func() error {
		if _, err := body.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return r.s.Put(ctx, name, body, size)
	})
}

func (r *retrying) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := r.do(ctx, "open", name, func() error {
		var err error
		rc, err = r.s.Open(ctx, name)
		return err
	})
	return rc, err
}

func (r *retrying) List(ctx context.Context, prefix string) ([]Object, error) {
	var objs []Object
	err := r.do(ctx, "list", prefix, func() error {
		var err error
		objs, err = r.s.List(ctx, prefix)
		return err
	})
	return objs, err
}

func (r *retrying) Delete(ctx context.Context, name string) error {
	return r.do(ctx, "delete", name, func() error { return r.s.Delete(ctx, name) })
}
