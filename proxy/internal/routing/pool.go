package routing

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
)

// ErrPoolClosed is returned by Conn after Close.
var ErrPoolClosed = errors.New("routing: connection pool closed")

// Pool keeps one client connection per broker address. Connections are
// lazy (grpc.NewClient) and reconnect by themselves; the pool never drops
// one before Close.
type Pool struct {
	opts []grpc.DialOption

	mu     sync.Mutex // guards conns and closed
	conns  map[string]*grpc.ClientConn
	closed bool
}

// Keepalive pings find a broker that stopped answering without closing its
// connections (SIGSTOP, a frozen VM, a silent partition): the connection
// fails after KeepaliveTime+KeepaliveTimeout, so a routing watch on it ends
// and moves to another broker, and forwards stop waiting on it. Brokers
// permit pings this often (broker.KeepaliveMinTime).
const (
	KeepaliveTime    = 5 * time.Second
	KeepaliveTimeout = 2 * time.Second
)

// reconnect is how a connection to a broker that went away dials again:
// gRPC's default backoff (1s growing to 2 minutes) would leave a broker
// restarted after a few seconds' outage unused for seconds more, while a
// dial a second to a broker that is down costs nothing. Each dial gets 2s
// to connect (the backoff alone would give the first ones 100ms).
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
	MinConnectTimeout: 2 * time.Second,
}

// NewPool returns a pool dialling with plain-text credentials, keepalive
// pings and the reconnect parameters above, plus opts.
func NewPool(opts ...grpc.DialOption) *Pool {
	all := append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithConnectParams(reconnect),
	}, opts...)
	return &Pool{opts: all, conns: make(map[string]*grpc.ClientConn)}
}

// Conn returns the connection to addr, creating it on first use.
func (p *Pool) Conn(addr string) (*grpc.ClientConn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrPoolClosed
	}
	if c, ok := p.conns[addr]; ok {
		return c, nil
	}
	c, err := grpc.NewClient(addr, p.opts...)
	if err != nil {
		return nil, fmt.Errorf("routing: dial %s: %w", addr, err)
	}
	p.conns[addr] = c
	return c, nil
}

// Close closes every connection; later Conn calls fail.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, c := range p.conns {
		_ = c.Close()
		delete(p.conns, addr)
	}
}
