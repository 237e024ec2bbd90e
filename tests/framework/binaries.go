package framework

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Binaries are the server executables a Cluster starts.
type Binaries struct {
	Broker string
	Proxy  string
}

var binaries struct {
	once sync.Once
	bin  Binaries
	err  error
}

// sourceModules are the modules the broker and proxy binaries are built from.
var sourceModules = []string{"broker", "proxy", "meta", "proto"}

// RepoRoot walks up from the working directory to the directory holding
// go.work.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("framework: no go.work above the working directory")
		}
		dir = parent
	}
}

// EnsureBinaries returns the broker and proxy binaries: those in <root>/bin
// (what make build writes) when both are newer than every .go, go.mod and
// go.sum file of the modules they are built from; else it builds them once
// per test process with go build into <tmp>/sundial-tests-bin-<uid>-<hash of
// the checkout's path>, under
// an flock so concurrent test processes do not write the same file. The
// variable SUNDIAL_BIN_DIR names a directory to use as it is.
func EnsureBinaries() (Binaries, error) {
	binaries.once.Do(func() { binaries.bin, binaries.err = ensureBinaries() })
	return binaries.bin, binaries.err
}

func ensureBinaries() (Binaries, error) {
	if dir := os.Getenv("SUNDIAL_BIN_DIR"); dir != "" {
		return Binaries{Broker: filepath.Join(dir, "sundial-broker"), Proxy: filepath.Join(dir, "sundial-proxy")}, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return Binaries{}, err
	}
	made := Binaries{Broker: filepath.Join(root, "bin", "sundial-broker"), Proxy: filepath.Join(root, "bin", "sundial-proxy")}
	newest, err := newestSource(root)
	if err != nil {
		return Binaries{}, err
	}
	if fresh(made.Broker, newest) && fresh(made.Proxy, newest) {
		return made, nil
	}
	// One directory per checkout: binaries another checkout built later
	// would look fresh here too.
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("sundial-tests-bin-%d-%016x", os.Getuid(), checkoutHash(root)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return Binaries{}, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return Binaries{}, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return Binaries{}, err
	}
	built := Binaries{Broker: filepath.Join(dir, "sundial-broker"), Proxy: filepath.Join(dir, "sundial-proxy")}
	if fresh(built.Broker, newest) && fresh(built.Proxy, newest) {
		return built, nil
	}
	args := []string{"build", "-o", dir + string(filepath.Separator), "./broker/cmd/sundial-broker", "./proxy/cmd/sundial-proxy"}
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return Binaries{}, fmt.Errorf("framework: go %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return built, nil
}

// newestSource is the latest modification time of the sources the server
// binaries are built from.
func newestSource(root string) (time.Time, error) {
	var newest time.Time
	for _, m := range sourceModules {
		err := filepath.WalkDir(filepath.Join(root, m), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); name == "testdata" || strings.HasPrefix(name, ".") {
					return filepath.SkipDir
				}
				return nil
			}
			name := d.Name()
			if strings.HasSuffix(name, "_test.go") || (!strings.HasSuffix(name, ".go") && name != "go.mod" && name != "go.sum") {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			if info.ModTime().After(newest) {
				newest = info.ModTime()
			}
			return nil
		})
		if err != nil {
			return time.Time{}, err
		}
	}
	return newest, nil
}

func fresh(path string, newest time.Time) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode()&0o111 != 0 && !st.ModTime().Before(newest)
}

// checkoutHash names a checkout by its path.
func checkoutHash(root string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(root))
	return h.Sum64()
}
