package proc

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Ports 20000-31999 lie below Linux's ephemeral range (32768-60999): a port
// handed out here cannot meanwhile become the source port of an outgoing
// connection.
const (
	portBase  = 20000
	portCount = 12000
)

var ports struct {
	mu   sync.Mutex
	next int
	held map[int]*os.File // port -> its locked file, held for the process's life
}

// FreeAddr returns a loopback address whose port was free a moment ago and
// that no other process using this allocator holds: each port handed out
// keeps an exclusive flock on <tmp>/sundial-ports/<port>.lock until the
// process ends (the kernel drops the lock when it dies). Each process starts
// its walk at its own offset.
func FreeAddr() (string, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	if ports.held == nil {
		ports.held = map[int]*os.File{}
		ports.next = os.Getpid() * 97 % portCount
	}
	dir := filepath.Join(os.TempDir(), "sundial-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return "", err
	}
	for range portCount {
		ports.next = (ports.next + 1) % portCount
		port := portBase + ports.next
		if _, mine := ports.held[port]; mine {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.lock", port)), os.O_CREATE|os.O_RDWR, 0o666)
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			f.Close()
			continue
		}
		l.Close()
		ports.held[port] = f
		return fmt.Sprintf("127.0.0.1:%d", port), nil
	}
	return "", errors.New("proc: no free port in 20000-31999")
}
