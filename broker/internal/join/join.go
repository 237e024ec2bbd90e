// Package join is the joining broker's side of Cluster.JoinCluster: it
// parses and resolves the --join addresses (host:port, or dns+srv://NAME
// resolved with an SRV lookup) and asks them, one after another, until one
// registers the broker. It owns no goroutines; Resolve and Ask block on
// their context.
package join

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/sundialmq/sundial/proto/apierr"
	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// SRVScheme prefixes a join address resolved with a DNS SRV lookup.
const SRVScheme = "dns+srv://"

// ErrBadAddress is the error of a join address that is neither host:port
// nor dns+srv://NAME.
var ErrBadAddress = errors.New("join: bad address")

// ErrNoBroker is the error of a join that no address answered.
var ErrNoBroker = errors.New("join: no broker answered")

// Parse checks one join address: host:port with a port from 1 to 65535,
// or dns+srv://NAME.
func Parse(spec string) error {
	if name, ok := strings.CutPrefix(spec, SRVScheme); ok {
		if name == "" || strings.ContainsAny(name, "/: ") {
			return fmt.Errorf("%w: %q: want dns+srv://NAME, e.g. dns+srv://_sundial-grpc._tcp.sundial.default.svc", ErrBadAddress, spec)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(spec)
	if err == nil {
		var p int
		p, err = strconv.Atoi(port)
		if err == nil && (host == "" || p < 1 || p > 65535) {
			err = errors.New("needs a host and a port from 1 to 65535")
		}
	}
	if err != nil {
		return fmt.Errorf("%w: %q is not a broker gRPC host:port nor dns+srv://NAME (%w)", ErrBadAddress, spec, err)
	}
	return nil
}

// SRVResolver looks up SRV records; *net.Resolver is one.
type SRVResolver interface {
	LookupSRV(ctx context.Context, service, proto, name string) (string, []*net.SRV, error)
}

// Resolve expands specs into broker addresses, in order: host:port as
// given, dns+srv://NAME as the targets of NAME's SRV records (in the
// resolver's priority and weight order). It fails on a bad spec or a name
// with no records; addresses repeated are listed once.
func Resolve(ctx context.Context, specs []string, r SRVResolver) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(a string) {
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for _, spec := range specs {
		if err := Parse(spec); err != nil {
			return nil, err
		}
		name, ok := strings.CutPrefix(spec, SRVScheme)
		if !ok {
			add(spec)
			continue
		}
		_, recs, err := r.LookupSRV(ctx, "", "", name)
		if err == nil && len(recs) == 0 {
			err = errors.New("no records")
		}
		if err != nil {
			return nil, fmt.Errorf("join: resolve %s: %w", spec, err)
		}
		for _, rec := range recs {
			add(net.JoinHostPort(strings.TrimSuffix(rec.Target, "."), strconv.Itoa(int(rec.Port))))
		}
	}
	return out, nil
}

// callTimeout bounds one broker's answer to a join.
const callTimeout = 10 * time.Second

// Ask sends req to each address in turn, over the connections peers
// hands out, until one registers the broker.
// A broker that answers NotLeader (no meta leader known there), is
// unreachable or is unavailable is skipped; a refusal (AlreadyExists,
// FailedPrecondition, InvalidArgument) ends the join at once, since every
// broker would answer the same. With every address skipped it waits
// retryInterval and tries them again until ctx ends.
func Ask(ctx context.Context, peers Dialer, addrs []string, req *sundialv1.JoinClusterRequest, retryInterval time.Duration) (*sundialv1.JoinClusterResponse, error) {
	var last error
	for {
		for _, addr := range addrs {
			resp, err := askOne(ctx, peers, addr, req)
			if err == nil {
				return resp, nil
			}
			if !retryable(err) {
				return nil, fmt.Errorf("join: %s refused the join: %s", addr, status.Convert(err).Message())
			}
			last = fmt.Errorf("%s: %w", addr, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w of %s (last: %w): %w", ErrNoBroker, strings.Join(addrs, ", "), last, ctx.Err())
		case <-time.After(retryInterval):
		}
	}
}

// Dialer hands out the connection to a broker's gRPC address; the
// broker's peer.Conns is one.
type Dialer interface {
	Conn(addr string) (*grpc.ClientConn, error)
}

func askOne(ctx context.Context, peers Dialer, addr string, req *sundialv1.JoinClusterRequest) (*sundialv1.JoinClusterResponse, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	conn, err := peers.Conn(addr)
	if err != nil {
		return nil, err
	}
	return sundialv1.NewClusterClient(conn).JoinCluster(ctx, req)
}

func retryable(err error) bool {
	if _, ok := apierr.AsNotLeader(err); ok {
		return true
	}
	switch status.Code(err) {
	case codes.AlreadyExists, codes.FailedPrecondition, codes.InvalidArgument, codes.PermissionDenied, codes.Unimplemented:
		return false
	}
	return true
}
