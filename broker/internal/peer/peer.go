// Package peer owns a broker's client connections to other brokers: one
// cache, Conns, keyed by the peer's gRPC address, through which every
// call from this broker to another goes (leader gossip, identity checks
// at start, joins, probes, forwarded meta calls, and the executor's and
// healer's shard changes and admin steps).
//
// Invariants: at most one connection per address, dialled with the
// node's peer transport credentials (TLS client config from
// proto/tlsfiles, or plaintext); a connection stays until Close, which
// the broker calls in Stop after every user of the cache has stopped;
// after Close no connection is handed out. Dial and call errors are
// returned as they are (gRPC statuses included): callers wrap them, and
// the Boundary interceptor of package service translates whatever reaches
// a client.
//
// Conns is safe for concurrent use: the gRPC handler goroutines, the
// gossip, healer and executor goroutines and the start-up path all call
// Conn; Stop's goroutine calls Close. The connections' own goroutines are
// gRPC's.
package peer

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrClosed is the error of Conn after Close.
var ErrClosed = errors.New("peer: connections closed")

// reconnect is the backoff of every peer connection: a node that comes
// back is redialled within a couple of seconds (gRPC's default backoff
// grows to two minutes, which would keep a healed node looking dead to
// the healer's probes and to leader gossip).
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: time.Second,
}

// alive is the keepalive of every peer connection: a peer that stops
// answering (paused, partitioned, its machine gone) fails the calls in
// flight on it within Time + Timeout, so a long call (a backup's shard
// capture) is tried again elsewhere instead of waiting for its deadline.
// Time stays above the brokers' enforcement MinTime (4s).
var alive = keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}

// Conns is the cache of connections to other brokers.
type Conns struct {
	creds credentials.TransportCredentials // of every connection

	mu     sync.Mutex                  // guards conns and closed
	conns  map[string]*grpc.ClientConn // by gRPC address
	closed bool
}

// New returns an empty cache whose connections use creds; nil means
// plaintext.
func New(creds credentials.TransportCredentials) *Conns {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return &Conns{creds: creds, conns: map[string]*grpc.ClientConn{}}
}

// Conn is the connection to the broker at addr, dialled on first use.
// gRPC connects lazily: an unreachable broker fails the calls made on the
// connection, not Conn.
func (c *Conns) Conn(addr string) (*grpc.ClientConn, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(c.creds), grpc.WithConnectParams(reconnect), grpc.WithKeepaliveParams(alive))
	if err != nil {
		return nil, fmt.Errorf("peer: dial %s: %w", addr, err)
	}
	c.conns[addr] = cc
	return cc, nil
}

// Close closes every connection; later calls of Conn answer ErrClosed.
// Safe to call more than once.
func (c *Conns) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	for addr, cc := range c.conns {
		_ = cc.Close()
		delete(c.conns, addr)
	}
}
