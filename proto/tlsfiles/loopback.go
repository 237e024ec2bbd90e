package tlsfiles

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// InsecureWarning is what a server started insecure logs at start and
// shows in its /readyz body.
const InsecureWarning = "insecure: serving without TLS on non-loopback addresses (--insecure); anyone on the network can call every API"

// Loopback reports whether the listen address addr (host:port) binds only
// loopback interfaces: its host is "localhost" or a loopback IP literal
// (127.0.0.0/8, ::1). An empty host, 0.0.0.0, [::] and every other name
// (which may resolve to any interface) are not loopback.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Listener is one listen address of a server and the config setting that
// holds it.
type Listener struct {
	Setting string // the config key, e.g. grpc_addr
	Addr    string // host:port; empty means the listener is disabled
}

// Exposed returns the listeners that bind a non-loopback address, in the
// order given; disabled ones (empty Addr) are skipped.
func Exposed(listeners ...Listener) []Listener {
	var out []Listener
	for _, l := range listeners {
		if l.Addr != "" && !Loopback(l.Addr) {
			out = append(out, l)
		}
	}
	return out
}

// RequireLoopback refuses, naming each setting, every listener that binds a
// non-loopback address while the server has no TLS, unless insecure is set
// (the operator's explicit choice to serve plaintext on the network).
func RequireLoopback(insecure bool, listeners ...Listener) error {
	if insecure {
		return nil
	}
	var errs []error
	for _, l := range Exposed(listeners...) {
		errs = append(errs, fmt.Errorf("%s: %s is not a loopback address and TLS is not configured: listen on 127.0.0.1, or set insecure: true (--insecure, SUNDIAL_INSECURE=true) to serve plaintext on the network", l.Setting, l.Addr))
	}
	return errors.Join(errs...)
}
