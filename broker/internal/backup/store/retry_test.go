package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

// flaky is a Store that fails each operation's first fails calls with err,
// and otherwise keeps objects in memory. A failing Put reads part of its
// reader first, as a connection cut mid-upload does.
type flaky struct {
	fails int
	err   error
	calls map[string]int
	objs  map[string]string
}

func newFlaky(fails int, err error) *flaky {
	return &flaky{fails: fails, err: err, calls: map[string]int{}, objs: map[string]string{}}
}

func (f *flaky) fail(op string) error {
	f.calls[op]++
	if f.calls[op] <= f.fails {
		return fmt.Errorf("flaky %s: %w", op, f.err)
	}
	return nil
}

func (f *flaky) Put(_ context.Context, name string, r io.ReadSeeker, size int64) error {
	if err := f.fail("put"); err != nil {
		if _, cerr := io.CopyN(io.Discard, r, size/2); cerr != nil {
			return fmt.Errorf("flaky put: reading the body before failing: %w", cerr)
		}
		return err
	}
	b, err := io.ReadAll(io.LimitReader(r, size))
	if err != nil {
		return err
	}
	f.objs[name] = string(b)
	return nil
}

func (f *flaky) Open(_ context.Context, name string) (io.ReadCloser, error) {
	if err := f.fail("open"); err != nil {
		return nil, err
	}
	b, ok := f.objs[name]
	if !ok {
		return nil, ErrNotFound
	}
	return io.NopCloser(strings.NewReader(b)), nil
}

func (f *flaky) List(context.Context, string) ([]Object, error) {
	if err := f.fail("list"); err != nil {
		return nil, err
	}
	return []Object{{Name: "x", Size: 1}}, nil
}

func (f *flaky) Delete(_ context.Context, name string) error {
	if err := f.fail("delete"); err != nil {
		return err
	}
	delete(f.objs, name)
	return nil
}

func (f *flaky) String() string { return "flaky://" }

var tinyPolicy = RetryPolicy{Attempts: 4, Initial: time.Microsecond, Max: 2 * time.Microsecond}

var errPassing = errors.New("connection reset by peer")

// ops runs each operation once on s and answers its error.
var ops = []struct {
	name string
	run  func(s Store) error
}{
	{"put", func(s Store) error {
		return s.Put(context.Background(), "obj", strings.NewReader("0123456789"), 10)
	}},
	{"open", func(s Store) error {
		rc, err := s.Open(context.Background(), "obj")
		if err == nil {
			rc.Close()
		}
		return err
	}},
	{"list", func(s Store) error {
		_, err := s.List(context.Background(), "")
		return err
	}},
	{"delete", func(s Store) error { return s.Delete(context.Background(), "obj") }},
}

func TestRetrying(t *testing.T) {
	tests := []struct {
		name      string
		fails     int
		err       error
		wantErr   error // nil: succeeds
		wantCalls int
	}{
		{"no failure", 0, errPassing, nil, 1},
		{"passing failures", 3, errPassing, nil, 4},
		{"out of attempts", 4, errPassing, errPassing, 4},
		{"not found", 5, ErrNotFound, ErrNotFound, 1},
		{"access denied", 5, ErrAccessDenied, ErrAccessDenied, 1},
		{"no bucket", 5, ErrNoBucket, ErrNoBucket, 1},
		{"bad name", 5, ErrBadName, ErrBadName, 1},
		{"cancelled", 5, context.Canceled, context.Canceled, 1},
		{"deadline", 5, context.DeadlineExceeded, context.DeadlineExceeded, 1},
	}
	for _, op := range ops {
		for _, tt := range tests {
			t.Run(op.name+"/"+tt.name, func(t *testing.T) {
				f := newFlaky(tt.fails, tt.err)
				f.objs["obj"] = "0123456789"
				var retries []int
				s := Retrying(f, tinyPolicy, func(gotOp, name string, attempt int, err error) {
					if gotOp != op.name || !errors.Is(err, tt.err) {
						t.Errorf("onRetry(%q, %q, %d, %v), want op %q and error %v", gotOp, name, attempt, err, op.name, tt.err)
					}
					retries = append(retries, attempt)
				})
				err := op.run(s)
				if (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
					t.Fatalf("%s = %v, want %v", op.name, err, tt.wantErr)
				}
				if got := f.calls[op.name]; got != tt.wantCalls {
					t.Fatalf("%s tried %d times, want %d", op.name, got, tt.wantCalls)
				}
				if len(retries) != tt.wantCalls-1 {
					t.Fatalf("onRetry called for attempts %v, want %d calls", retries, tt.wantCalls-1)
				}
				for i, a := range retries {
					if a != i+1 {
						t.Fatalf("onRetry attempts = %v, want 1, 2, ...", retries)
					}
				}
			})
		}
	}
}

// TestRetryingPutRewinds checks that each try of a Put reads its reader
// from the start.
func TestRetryingPutRewinds(t *testing.T) {
	f := newFlaky(2, errPassing)
	s := Retrying(f, tinyPolicy, nil)
	r := strings.NewReader("0123456789")
	if _, err := r.Seek(7, io.SeekStart); err != nil { // even a reader handed over part-read
		t.Fatalf("Seek = %v", err)
	}
	if err := s.Put(context.Background(), "obj", r, 10); err != nil {
		t.Fatalf("Put = %v", err)
	}
	if got := f.objs["obj"]; got != "0123456789" {
		t.Fatalf("stored %q after retries, want %q", got, "0123456789")
	}
}

// TestRetryingStopsWhenCancelled cancels the context during the wait
// before a retry, which is long: the call must return at once, with the
// context's error.
func TestRetryingStopsWhenCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	f := newFlaky(10, errPassing)
	s := Retrying(f, RetryPolicy{Attempts: 5, Initial: time.Hour, Max: time.Hour}, func(string, string, int, error) { cancel() })
	err := s.Delete(ctx, "obj")
	if !errors.Is(err, context.Canceled) || !errors.Is(err, errPassing) {
		t.Fatalf("Delete = %v, want context.Canceled and the last failure", err)
	}
	if f.calls["delete"] != 1 {
		t.Fatalf("Delete tried %d times, want 1", f.calls["delete"])
	}
}

func TestRetryWait(t *testing.T) {
	p := RetryPolicy{Attempts: 9, Initial: 100 * time.Millisecond, Max: 350 * time.Millisecond}
	tests := []struct {
		attempt  int
		min, max time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 175 * time.Millisecond, 350 * time.Millisecond},
		{8, 175 * time.Millisecond, 350 * time.Millisecond},
		{1000, 175 * time.Millisecond, 350 * time.Millisecond},
	}
	for _, tt := range tests {
		for range 100 {
			if got := p.wait(tt.attempt); got < tt.min || got > tt.max {
				t.Fatalf("wait(%d) = %v, want within [%v, %v]", tt.attempt, got, tt.min, tt.max)
			}
		}
	}
}

func TestRetryPolicyDefaults(t *testing.T) {
	tests := []struct {
		in, want RetryPolicy
	}{
		{RetryPolicy{}, DefaultRetryPolicy()},
		{RetryPolicy{Attempts: 2}, RetryPolicy{Attempts: 2, Initial: 200 * time.Millisecond, Max: 5 * time.Second}},
		{RetryPolicy{Initial: 10 * time.Second}, RetryPolicy{Attempts: 5, Initial: 10 * time.Second, Max: 10 * time.Second}},
	}
	for _, tt := range tests {
		if got := tt.in.withDefaults(); got != tt.want {
			t.Errorf("%+v.withDefaults() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}
