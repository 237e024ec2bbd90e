package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	miniocreds "github.com/minio/minio-go/v7/pkg/credentials"
)

// s3Dest is a parsed s3:// URL.
type s3Dest struct {
	bucket string
	// prefix is the URL's path without its leading slash: empty, or
	// ending in a slash.
	prefix string
	// endpoint is host[:port], empty for s3.amazonaws.com.
	endpoint string
	// region is the URL's region, else AWS_REGION; empty asks the server.
	region string
	// tls is whether to speak https; tlsGiven whether the URL said.
	tls, tlsGiven bool
}

// s3Store keeps objects in an S3 bucket under a prefix.
type s3Store struct {
	dest   s3Dest
	shown  string // the URL as String answers it
	client *minio.Client
}

// s3RequestRetries is how many times the S3 client sends one request
// before failing it: a part of a large upload that hits a passing error is
// sent again without restarting the object. Retrying retries whole
// operations on top.
const s3RequestRetries = 3

func newS3(d s3Dest, regionInURL bool, c credentials) (*s3Store, error) {
	opts := &minio.Options{
		Creds:      miniocreds.NewStaticV4(c.accessKeyID, c.secretAccessKey, c.sessionToken),
		Secure:     d.tls,
		Region:     d.region,
		MaxRetries: s3RequestRetries,
	}
	endpoint := d.endpoint
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	} else {
		opts.BucketLookup = minio.BucketLookupPath
	}
	client, err := minio.New(endpoint, opts)
	if err != nil {
		// minio refuses an endpoint it cannot use; it holds no secret.
		return nil, &URLError{URL: d.url(regionInURL), Reason: err.Error()}
	}
	return &s3Store{dest: d, shown: d.url(regionInURL), client: client}, nil
}

// url renders d as an s3:// URL with the parameters it was given, in a
// fixed order and with host:port left readable.
func (d s3Dest) url(withRegion bool) string {
	var q []string
	if d.endpoint != "" {
		q = append(q, "endpoint="+d.endpoint) // checkEndpoint: nothing to escape
	}
	if withRegion {
		q = append(q, "region="+url.QueryEscape(d.region))
	}
	if d.tlsGiven {
		q = append(q, fmt.Sprintf("tls=%t", d.tls))
	}
	u := "s3://" + d.bucket
	if d.prefix != "" {
		u += "/" + (&url.URL{Path: strings.TrimSuffix(d.prefix, "/")}).EscapedPath()
	}
	if len(q) > 0 {
		u += "?" + strings.Join(q, "&")
	}
	return u
}

func (s *s3Store) String() string { return s.shown }

// where names an object for an error: s3://bucket/prefix/name.
func (s *s3Store) where(name string) string {
	return "s3://" + s.dest.bucket + "/" + s.dest.prefix + name
}

// s3Err wraps an error of the S3 client for an operation on name, naming
// the sentinel a caller matches on.
func (s *s3Store) s3Err(ctx context.Context, op, name string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("store: %s %s: %w", op, s.where(name), ctx.Err())
	}
	var resp minio.ErrorResponse
	if errors.As(err, &resp) {
		var sentinel error
		switch resp.Code {
		case minio.NoSuchKey, "NotFound":
			sentinel = ErrNotFound
		case minio.NoSuchBucket:
			sentinel = ErrNoBucket
		case minio.AccessDenied, "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
			"InvalidToken", "TokenRefreshRequired", "AllAccessDisabled", "AccountProblem":
			sentinel = ErrAccessDenied
		}
		if sentinel != nil {
			return fmt.Errorf("%w: %s %s: %w", sentinel, op, s.where(name), err)
		}
	}
	return fmt.Errorf("store: %s %s: %w", op, s.where(name), err)
}

func (s *s3Store) Put(ctx context.Context, name string, r io.ReadSeeker, size int64) error {
	if err := checkName(name); err != nil {
		return err
	}
	_, err := s.client.PutObject(ctx, s.dest.bucket, s.dest.prefix+name, r, size, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// Over plain http the client signs the payload in chunks, and sends
		// an empty one with no Content-Length, which S3 servers refuse; an
		// empty payload has nothing to sign.
		DisableContentSha256: size == 0,
	})
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: %w", errShortBody, err)
		}
		return s.s3Err(ctx, "put", name, err)
	}
	return nil
}

func (s *s3Store) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.dest.bucket, s.dest.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.s3Err(ctx, "open", name, err)
	}
	// GetObject sends nothing until asked: Stat sends the GET, so a
	// missing object fails here rather than on the first Read.
	if _, err := obj.Stat(); err != nil {
		obj.Close()
		return nil, s.s3Err(ctx, "open", name, err)
	}
	return obj, nil
}

func (s *s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine on an early return
	var objs []Object
	for info := range s.client.ListObjects(ctx, s.dest.bucket, minio.ListObjectsOptions{Prefix: s.dest.prefix + prefix, Recursive: true}) {
		if info.Err != nil {
			return nil, s.s3Err(ctx, "list", prefix, info.Err)
		}
		name, ok := strings.CutPrefix(info.Key, s.dest.prefix)
		if !ok || checkName(name) != nil {
			continue // not an object this store could have written
		}
		objs = append(objs, Object{Name: name, Size: info.Size})
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return objs, nil
}

func (s *s3Store) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.dest.bucket, s.dest.prefix+name, minio.RemoveObjectOptions{})
	if err != nil {
		err = s.s3Err(ctx, "delete", name, err)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}
