package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// fileStore keeps objects as files under root, an absolute directory
// created by the first Put. A Put writes a dot-named temporary file beside
// its target (never listed, see checkName) and renames it into place.
type fileStore struct {
	root string
}

func (s *fileStore) String() string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(s.root)}).String()
}

func (s *fileStore) path(name string) string {
	return filepath.Join(s.root, filepath.FromSlash(name))
}

// fsErr wraps an error of the operating system for name, naming the
// sentinel a caller matches on.
func (s *fileStore) fsErr(op, name string, err error) error {
	where := s.path(name)
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path == where {
		err = pe.Err // the path is said once
	}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %s %s: %w", ErrNotFound, op, where, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %s %s: %w", ErrAccessDenied, op, where, err)
	default:
		return fmt.Errorf("store: %s %s: %w", op, where, err)
	}
}

func (s *fileStore) Put(ctx context.Context, name string, r io.ReadSeeker, size int64) (err error) {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	target := s.path(name)
	dir := filepath.Dir(target)
	f, err := createTemp(dir, "."+filepath.Base(target)+".tmp-*")
	if err != nil {
		return s.fsErr("put", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	n, err := io.Copy(f, io.LimitReader(ctxReader{ctx, r}, size))
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("store: put %s: %w", target, err)
	}
	if n < size {
		return fmt.Errorf("%w: put %s: %d of %d bytes", errShortBody, target, n, size)
	}
	if err := f.Sync(); err != nil {
		return s.fsErr("put", name, err)
	}
	if err := f.Close(); err != nil {
		return s.fsErr("put", name, err)
	}
	if err := os.Rename(tmp, target); err != nil {
		return s.fsErr("put", name, err)
	}
	if err := syncDir(dir); err != nil {
		return s.fsErr("put", name, err)
	}
	return nil
}

// createTemp creates a temporary file in dir, creating dir (and its
// parents) as needed. A Delete may remove an emptied dir between the two
// steps, so a missing dir is tried again a few times.
func createTemp(dir, pattern string) (*os.File, error) {
	var err error
	for range 3 {
		if err = os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		var f *os.File
		if f, err = os.CreateTemp(dir, pattern); !errors.Is(err, fs.ErrNotExist) {
			return f, err
		}
	}
	return nil, err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}

// ctxReader stops a copy once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

func (s *fileStore) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	f, err := os.Open(s.path(name))
	if err != nil {
		return nil, s.fsErr("open", name, err)
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fs.ErrNotExist
		}
		return nil, s.fsErr("open", name, err)
	}
	return f, nil
}

func (s *fileStore) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := checkPrefix(prefix); err != nil {
		return nil, err
	}
	// Walk only the directory the prefix's whole segments name.
	start := ""
	if i := strings.LastIndexByte(prefix, '/'); i >= 0 {
		start = prefix[:i]
	}
	var objs []Object
	err := filepath.WalkDir(s.path(start), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == s.path(start) && (errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)) {
				return fs.SkipAll // nothing stored under the prefix yet
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != s.path(start) {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // a Put in progress, or not ours
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(s.root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if !strings.HasPrefix(name, prefix) {
			return nil
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted while we walked
		}
		if err != nil {
			return err
		}
		objs = append(objs, Object{Name: name, Size: info.Size()})
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, s.fsErr("list", prefix, err)
	}
	slices.SortFunc(objs, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return objs, nil
}

func (s *fileStore) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return s.fsErr("delete", name, err)
	}
	// Remove the directories the object leaves empty, up to the root;
	// one that is not empty stays, and stops the climb.
	for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
		if os.Remove(s.path(dir)) != nil {
			break
		}
	}
	return nil
}
