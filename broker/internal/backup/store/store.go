package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Object is one stored object.
type Object struct {
	// Name is the object's slash-separated name relative to the
	// destination's root.
	Name string
	// Size is the object's length in bytes.
	Size int64
}

// Store is one backup destination. Names are slash-separated, relative to
// the destination's root.
type Store interface {
	// Put stores size bytes read from r as name, replacing any object of
	// that name. It is atomic: a reader sees the whole object or none.
	Put(ctx context.Context, name string, r io.ReadSeeker, size int64) error
	// Open opens name for reading; a missing object is an error wrapping
	// ErrNotFound. The caller closes the reader.
	Open(ctx context.Context, name string) (io.ReadCloser, error)
	// List answers every object whose name starts with prefix, sorted by
	// name.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes name; a missing object is no error.
	Delete(ctx context.Context, name string) error
	// String is the destination's URL with any secret removed: safe for
	// logs and answers.
	String() string
}

var (
	// ErrNotFound is wrapped by the error of Open for a missing object.
	ErrNotFound = errors.New("store: object not found")
	// ErrAccessDenied is wrapped by an error the destination answered
	// because the credentials are missing, wrong or lack a permission.
	ErrAccessDenied = errors.New("store: access denied")
	// ErrNoBucket is wrapped by an error for an S3 bucket that does not
	// exist.
	ErrNoBucket = errors.New("store: no such bucket")
	// ErrBadName refuses an object name or list prefix outside the rules:
	// no leading slash, no empty segment, no segment starting with a dot.
	ErrBadName = errors.New("store: bad object name")
	// ErrNoCredentials refuses an S3 destination for which neither the
	// environment nor the credentials file holds an access key.
	ErrNoCredentials = errors.New("store: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY " +
		"in the broker's environment, or name a credentials file")
	// errShortBody is a Put whose reader held fewer bytes than its size.
	errShortBody = errors.New("store: the reader ended before the object's size")
)

// URLError refuses a destination URL; its message is meant for an
// operator.
type URLError struct {
	// URL is the URL as given, with any secret removed.
	URL string
	// Reason says what is wrong and how to put it right.
	Reason string
}

func (e *URLError) Error() string {
	if e.URL == "" {
		return "store: bad destination URL: " + e.Reason
	}
	return fmt.Sprintf("store: bad destination URL %q: %s", e.URL, e.Reason)
}

// checkName answers an error wrapping ErrBadName unless name is a valid
// object name.
func checkName(name string) error {
	if name == "" {
		return fmt.Errorf("%w: empty", ErrBadName)
	}
	return checkPath(name, name)
}

// checkPrefix answers an error wrapping ErrBadName unless prefix, which
// may be empty or end in a partial segment, could start a valid name.
func checkPrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	// Every segment but the last is whole; the last may be any start of
	// one, so give it a harmless completion before checking.
	return checkPath(prefix, prefix+"x")
}

func checkPath(shown, p string) error {
	if strings.ContainsRune(p, 0) {
		return fmt.Errorf("%w: %q holds a NUL byte", ErrBadName, shown)
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch {
		case seg == "":
			return fmt.Errorf("%w: %q has an empty segment (or starts or ends with a slash)", ErrBadName, shown)
		case seg[0] == '.':
			return fmt.Errorf("%w: %q has a segment starting with a dot", ErrBadName, shown)
		}
	}
	return nil
}

// permanent reports whether err will fail the same way if the operation is
// tried again.
func permanent(err error) bool {
	var ue *URLError
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrAccessDenied) || errors.Is(err, ErrNoBucket) ||
		errors.Is(err, ErrBadName) || errors.Is(err, ErrNoCredentials) || errors.Is(err, errShortBody) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ue)
}
