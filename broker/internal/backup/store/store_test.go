package store

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const (
	testKeyID  = "AKIDTESTSUNDIAL"
	testSecret = "s3cr3t-never-shown-0123456789"
)

// kinds opens a fresh, empty store of each kind.
var kinds = []struct {
	name string
	open func(t *testing.T) Store
}{
	{"file", func(t *testing.T) Store {
		s, err := Open("file://"+t.TempDir()+"/dest", Config{})
		if err != nil {
			t.Fatalf("Open(file) = %v", err)
		}
		return s
	}},
	{"s3", func(t *testing.T) Store {
		f := newFakeS3(t, testKeyID, "sundial")
		s, err := Open(f.url("sundial", "cluster/one"), Config{Getenv: env(map[string]string{
			"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret,
		})})
		if err != nil {
			t.Fatalf("Open(s3) = %v", err)
		}
		return s
	}},
}

func put(ctx context.Context, t *testing.T, s Store, name, body string) {
	t.Helper()
	if err := s.Put(ctx, name, strings.NewReader(body), int64(len(body))); err != nil {
		t.Fatalf("Put(%q) = %v", name, err)
	}
}

func read(ctx context.Context, t *testing.T, s Store, name string) string {
	t.Helper()
	rc, err := s.Open(ctx, name)
	if err != nil {
		t.Fatalf("Open(%q) = %v", name, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Open(%q): read = %v", name, err)
	}
	return string(b)
}

func names(objs []Object) []string {
	var n []string
	for _, o := range objs {
		n = append(n, o.Name)
	}
	return n
}

// TestStoreBehaviour runs every behaviour a Store promises against each
// kind of store.
func TestStoreBehaviour(t *testing.T) {
	ctx := context.Background()
	behaviours := []struct {
		name string
		run  func(t *testing.T, s Store)
	}{
		{"put then open", func(t *testing.T, s Store) {
			put(ctx, t, s, "backups/a/shard-1.sdb", "hello")
			if got := read(ctx, t, s, "backups/a/shard-1.sdb"); got != "hello" {
				t.Fatalf("Open(backups/a/shard-1.sdb) read %q, want %q", got, "hello")
			}
		}},
		{"empty object", func(t *testing.T, s Store) {
			put(ctx, t, s, "empty", "")
			if got := read(ctx, t, s, "empty"); got != "" {
				t.Fatalf("Open(empty) read %q, want nothing", got)
			}
			objs, err := s.List(ctx, "")
			if err != nil || len(objs) != 1 || objs[0] != (Object{Name: "empty", Size: 0}) {
				t.Fatalf("List(\"\") = %v, %v, want [{empty 0}]", objs, err)
			}
		}},
		{"overwrite", func(t *testing.T, s Store) {
			put(ctx, t, s, "x/MANIFEST.json", "first and longer")
			put(ctx, t, s, "x/MANIFEST.json", "second")
			if got := read(ctx, t, s, "x/MANIFEST.json"); got != "second" {
				t.Fatalf("Open after overwrite read %q, want %q", got, "second")
			}
			objs, err := s.List(ctx, "x/")
			if err != nil || len(objs) != 1 || objs[0].Size != 6 {
				t.Fatalf("List(x/) = %v, %v, want one object of 6 bytes", objs, err)
			}
		}},
		{"open missing", func(t *testing.T, s Store) {
			put(ctx, t, s, "present", "1")
			_, err := s.Open(ctx, "absent/thing")
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("Open(absent/thing) = %v, want ErrNotFound", err)
			}
		}},
		{"delete", func(t *testing.T, s Store) {
			put(ctx, t, s, "backups/b/shard-1.sdb", "one")
			put(ctx, t, s, "backups/b/shard-2.sdb", "two")
			if err := s.Delete(ctx, "backups/b/shard-1.sdb"); err != nil {
				t.Fatalf("Delete = %v", err)
			}
			if _, err := s.Open(ctx, "backups/b/shard-1.sdb"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Open(deleted) = %v, want ErrNotFound", err)
			}
			objs, err := s.List(ctx, "backups/")
			if got := names(objs); err != nil || !slices.Equal(got, []string{"backups/b/shard-2.sdb"}) {
				t.Fatalf("List(backups/) = %v, %v, want [backups/b/shard-2.sdb]", got, err)
			}
			if err := s.Delete(ctx, "backups/b/shard-2.sdb"); err != nil {
				t.Fatalf("Delete(last) = %v", err)
			}
			put(ctx, t, s, "backups/b/shard-3.sdb", "three") // into a directory the delete emptied
			if got := read(ctx, t, s, "backups/b/shard-3.sdb"); got != "three" {
				t.Fatalf("Open after re-put read %q, want three", got)
			}
		}},
		{"delete missing", func(t *testing.T, s Store) {
			if err := s.Delete(ctx, "never/was"); err != nil {
				t.Fatalf("Delete(never/was) = %v, want nil", err)
			}
		}},
		{"list with prefix", func(t *testing.T, s Store) {
			for _, n := range []string{"backups/b/2", "other", "backups/a/y", "backups/a/x", "backups/ab/z", "backupsx"} {
				put(ctx, t, s, n, n)
			}
			tests := []struct {
				prefix string
				want   []string
			}{
				{"", []string{"backups/a/x", "backups/a/y", "backups/ab/z", "backups/b/2", "backupsx", "other"}},
				{"backups/", []string{"backups/a/x", "backups/a/y", "backups/ab/z", "backups/b/2"}},
				{"backups/a/", []string{"backups/a/x", "backups/a/y"}},
				{"backups/a", []string{"backups/a/x", "backups/a/y", "backups/ab/z"}},
				{"backups", []string{"backups/a/x", "backups/a/y", "backups/ab/z", "backups/b/2", "backupsx"}},
				{"backups/a/x", []string{"backups/a/x"}},
				{"nothing/", nil},
				{"backups/a/x/", nil},
			}
			for _, tt := range tests {
				objs, err := s.List(ctx, tt.prefix)
				if got := names(objs); err != nil || !slices.Equal(got, tt.want) {
					t.Errorf("List(%q) = %v, %v, want %v", tt.prefix, got, err, tt.want)
				}
				for _, o := range objs {
					if o.Size != int64(len(o.Name)) {
						t.Errorf("List(%q): %s has size %d, want %d", tt.prefix, o.Name, o.Size, len(o.Name))
					}
				}
			}
		}},
		{"bad names", func(t *testing.T, s Store) {
			for _, n := range []string{"", "/abs", "a//b", "trailing/", "../up", "a/../b", "a/./b", "a/.hidden"} {
				if err := s.Put(ctx, n, strings.NewReader("x"), 1); !errors.Is(err, ErrBadName) {
					t.Errorf("Put(%q) = %v, want ErrBadName", n, err)
				}
				if _, err := s.Open(ctx, n); !errors.Is(err, ErrBadName) {
					t.Errorf("Open(%q) = %v, want ErrBadName", n, err)
				}
				if err := s.Delete(ctx, n); !errors.Is(err, ErrBadName) {
					t.Errorf("Delete(%q) = %v, want ErrBadName", n, err)
				}
			}
			for _, p := range []string{"/abs", "a//", "../", "a/.", ".x"} {
				if _, err := s.List(ctx, p); !errors.Is(err, ErrBadName) {
					t.Errorf("List(%q) = %v, want ErrBadName", p, err)
				}
			}
		}},
		{"short reader stores nothing", func(t *testing.T, s Store) {
			err := s.Put(ctx, "short", strings.NewReader("abc"), 10)
			if err == nil {
				t.Fatalf("Put(3 bytes, size 10) = nil, want an error")
			}
			if _, err := s.Open(ctx, "short"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Open after a failed Put = %v, want ErrNotFound", err)
			}
			if objs, err := s.List(ctx, ""); err != nil || len(objs) != 0 {
				t.Fatalf("List after a failed Put = %v, %v, want nothing", objs, err)
			}
		}},
		{"cancelled context", func(t *testing.T, s Store) {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			if err := s.Put(cctx, "c", strings.NewReader("x"), 1); !errors.Is(err, context.Canceled) {
				t.Fatalf("Put(cancelled) = %v, want context.Canceled", err)
			}
		}},
		{"large object", func(t *testing.T, s Store) {
			body := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
			if err := s.Put(ctx, "big", bytes.NewReader(body), int64(len(body))); err != nil {
				t.Fatalf("Put(1 MiB) = %v", err)
			}
			if got := read(ctx, t, s, "big"); got != string(body) {
				t.Fatalf("Open(big) read %d bytes, not the %d put", len(got), len(body))
			}
		}},
	}
	for _, k := range kinds {
		for _, b := range behaviours {
			t.Run(k.name+"/"+b.name, func(t *testing.T) {
				s := k.open(t)
				b.run(t, s)
				if strings.Contains(s.String(), testSecret) {
					t.Fatalf("String() = %q holds the secret", s.String())
				}
			})
		}
	}
}

func TestFileStoreLeavesNoTemporaryFiles(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "dest")
	s, err := Open("file://"+root, Config{})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	put(ctx, t, s, "backups/a/shard-1.sdb", "ok")
	if err := s.Put(ctx, "backups/a/shard-2.sdb", strings.NewReader("ab"), 5); err == nil {
		t.Fatalf("Put(short) = nil, want an error")
	}
	entries, err := os.ReadDir(filepath.Join(root, "backups", "a"))
	if err != nil {
		t.Fatalf("ReadDir = %v", err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if !slices.Equal(got, []string{"shard-1.sdb"}) {
		t.Fatalf("files in %s = %v, want [shard-1.sdb]", filepath.Join(root, "backups", "a"), got)
	}
	// A temporary file of a Put in progress is not listed.
	if err := os.WriteFile(filepath.Join(root, "backups", "a", ".shard-3.sdb.tmp-1"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	objs, err := s.List(ctx, "")
	if got := names(objs); err != nil || !slices.Equal(got, []string{"backups/a/shard-1.sdb"}) {
		t.Fatalf("List(\"\") = %v, %v, want [backups/a/shard-1.sdb]", got, err)
	}
	// Deleting the last object removes the directories it emptied.
	if err := s.Delete(ctx, "backups/a/shard-1.sdb"); err != nil {
		t.Fatalf("Delete = %v", err)
	}
	if err := os.Remove(filepath.Join(root, "backups", "a", ".shard-3.sdb.tmp-1")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "backups/a/gone"); err != nil {
		t.Fatalf("Delete(missing) = %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "backups")); !os.IsNotExist(err) {
		t.Fatalf("Stat(backups) after deleting everything = %v, want not exist", err)
	}
}

func TestFileStoreMissingRootListsNothing(t *testing.T) {
	s, err := Open("file://"+filepath.Join(t.TempDir(), "not", "yet"), Config{})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	objs, err := s.List(context.Background(), "backups/")
	if err != nil || len(objs) != 0 {
		t.Fatalf("List on a missing root = %v, %v, want nothing", objs, err)
	}
}

// TestS3Prefix checks that a store under a prefix keeps its objects there
// and lists only them.
func TestS3Prefix(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t, testKeyID, "sundial")
	cfg := Config{Getenv: env(map[string]string{"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret})}
	root, err := Open(f.url("sundial", ""), cfg)
	if err != nil {
		t.Fatalf("Open(root) = %v", err)
	}
	sub, err := Open(f.url("sundial", "prod/eu"), cfg)
	if err != nil {
		t.Fatalf("Open(prod/eu) = %v", err)
	}
	put(ctx, t, sub, "backups/a", "in prefix")
	put(ctx, t, root, "prod/other", "beside it")
	if got := read(ctx, t, root, "prod/eu/backups/a"); got != "in prefix" {
		t.Fatalf("root Open(prod/eu/backups/a) read %q, want %q", got, "in prefix")
	}
	objs, err := sub.List(ctx, "")
	if got := names(objs); err != nil || !slices.Equal(got, []string{"backups/a"}) {
		t.Fatalf("prefixed List(\"\") = %v, %v, want [backups/a]", got, err)
	}
}

func TestS3NoSuchBucket(t *testing.T) {
	f := newFakeS3(t, testKeyID, "sundial")
	s, err := Open(f.url("missing", ""), Config{Getenv: env(map[string]string{
		"AWS_ACCESS_KEY_ID": testKeyID, "AWS_SECRET_ACCESS_KEY": testSecret,
	})})
	if err != nil {
		t.Fatalf("Open = %v", err)
	}
	err = s.Put(context.Background(), "x", strings.NewReader("x"), 1)
	if !errors.Is(err, ErrNoBucket) {
		t.Fatalf("Put into a missing bucket = %v, want ErrNoBucket", err)
	}
	if _, err := s.List(context.Background(), ""); !errors.Is(err, ErrNoBucket) {
		t.Fatalf("List of a missing bucket = %v, want ErrNoBucket", err)
	}
}
