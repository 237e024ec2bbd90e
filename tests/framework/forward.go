package framework

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Route is what a Forwarder does with the bytes of one connection.
type Route struct {
	// Drop blackholes the connection: bytes are read and discarded, like
	// packets lost in a partition (no reset). A connection that dropped
	// bytes is closed when it is routed again, since its stream is broken.
	Drop bool
	// Delay holds every chunk this long before passing it on.
	Delay time.Duration
}

// Forwarder is a TCP proxy from a loopback listen address to a target. A
// route function, asked at accept and at every Reroute, decides per
// connection from the name of the process that dialled it.
type Forwarder struct {
	name   string
	target string
	ln     net.Listener
	// source names the process owning a local port ("" when unknown).
	source func(port int) string
	route  func(from string) Route

	mu     sync.Mutex // guards conns and closed
	conns  map[*fwdConn]struct{}
	closed bool
	wg     sync.WaitGroup
}

type fwdConn struct {
	from      string
	in, out   net.Conn
	mu        sync.Mutex // guards route and dropped
	route     Route
	dropped   bool
	closeOnce sync.Once
}

// NewForwarder listens on listen and forwards to target.
func NewForwarder(name, listen, target string, source func(port int) string, route func(from string) Route) (*Forwarder, error) {
	ln, err := net.Listen("tcp4", listen)
	if err != nil {
		return nil, fmt.Errorf("framework: forwarder %s: %w", name, err)
	}
	f := &Forwarder{name: name, target: target, ln: ln, source: source, route: route, conns: map[*fwdConn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	return f, nil
}

// Addr is the address the forwarder listens on.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

func (f *Forwarder) accept() {
	defer f.wg.Done()
	for {
		in, err := f.ln.Accept()
		if err != nil {
			return
		}
		from := ""
		if a, ok := in.RemoteAddr().(*net.TCPAddr); ok && f.source != nil {
			from = f.source(a.Port)
		}
		c := &fwdConn{from: from, in: in, route: f.route(from)}
		f.mu.Lock()
		if f.closed {
			f.mu.Unlock()
			in.Close()
			return
		}
		f.conns[c] = struct{}{}
		f.mu.Unlock()
		f.wg.Add(1)
		go f.serve(c)
	}
}

func (f *Forwarder) serve(c *fwdConn) {
	defer f.wg.Done()
	defer f.forget(c)
	out, err := net.DialTimeout("tcp4", f.target, 2*time.Second)
	if err != nil {
		c.in.Close()
		return
	}
	c.out = out
	done := make(chan struct{}, 2)
	go func() { c.pipe(out, c.in); done <- struct{}{} }()
	go func() { c.pipe(c.in, out); done <- struct{}{} }()
	<-done
	c.close()
	<-done
}

// pipe copies src to dst chunk by chunk under the connection's route.
func (c *fwdConn) pipe(dst, src net.Conn) {
	r := bufio.NewReaderSize(src, 32<<10)
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			c.mu.Lock()
			rt := c.route
			if rt.Drop {
				c.dropped = true
			}
			c.mu.Unlock()
			if !rt.Drop {
				if rt.Delay > 0 {
					time.Sleep(rt.Delay)
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

func (c *fwdConn) close() {
	c.closeOnce.Do(func() {
		c.in.Close()
		if c.out != nil {
			c.out.Close()
		}
	})
}

func (f *Forwarder) forget(c *fwdConn) {
	f.mu.Lock()
	delete(f.conns, c)
	f.mu.Unlock()
}

// Reroute asks the route function again for every open connection. A
// connection that dropped bytes and is no longer dropped is closed (its
// peers reconnect); one newly dropped goes silent.
func (f *Forwarder) Reroute() {
	f.mu.Lock()
	conns := make([]*fwdConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		rt := f.route(c.from)
		c.mu.Lock()
		broken := c.dropped && !rt.Drop
		c.route = rt
		c.mu.Unlock()
		if broken {
			c.close()
		}
	}
}

// Close stops accepting, closes every connection and waits for their
// goroutines.
func (f *Forwarder) Close() {
	f.mu.Lock()
	f.closed = true
	for c := range f.conns {
		c.close()
	}
	f.mu.Unlock()
	f.ln.Close()
	f.wg.Wait()
}

// socketOwner names the process (among pids) owning the loopback TCP socket
// whose local port is port and whose peer port is peer, from /proc/net/tcp
// and /proc/PID/fd; "" when none of pids does.
func socketOwner(port, peer int, pids map[int]string) string {
	inode := socketInode(port, peer)
	if inode == "" {
		return ""
	}
	want := "socket:[" + inode + "]"
	for pid, name := range pids {
		dir := "/proc/" + strconv.Itoa(pid) + "/fd"
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && l == want {
				return name
			}
		}
	}
	return ""
}

// socketInode is the inode of the IPv4 socket with local port port and
// remote port peer, or "".
func socketInode(port, peer int) string {
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return ""
	}
	local := fmt.Sprintf(":%04X", port)
	remote := fmt.Sprintf(":%04X", peer)
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 {
			continue
		}
		if strings.HasSuffix(f[1], local) && strings.HasSuffix(f[2], remote) {
			return f[9]
		}
	}
	return ""
}

// Sources names the dialling process of each open connection ("" when it
// was not found).
func (f *Forwarder) Sources() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.conns))
	for c := range f.conns {
		out = append(out, c.from)
	}
	return out
}
