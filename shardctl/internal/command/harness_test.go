package command

import (
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"

	sundialv1 "github.com/sundialmq/sundial/proto/gen/sundial/v1"
)

// serve runs a gRPC server on a loopback port with the services register
// adds, stopped when the test ends, and answers its address.
func serve(t *testing.T, register func(*grpc.Server)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

// serveCluster serves fake as the Cluster service (what the proxy answers
// shardctl's node, shard and operation commands with).
func serveCluster(t *testing.T, fake sundialv1.ClusterServer) string {
	t.Helper()
	return serve(t, func(s *grpc.Server) { sundialv1.RegisterClusterServer(s, fake) })
}

// cliCase is one shardctl command line and what it must answer: its exit
// code, and text its stdout and its stderr contain ("" matches any).
type cliCase struct {
	name       string
	args       []string
	wantCode   int
	wantOut    string
	wantStderr string
}

// check runs shardctl --proxy proxy with tc.args and fails the test unless
// the run answers what tc wants. It answers the run's stderr, for checks
// of what it must not say.
func (tc cliCase) check(t *testing.T, proxy string) string {
	t.Helper()
	return tc.checkRun(t, "", append([]string{"--proxy", proxy}, tc.args...))
}

// checkRun is check for a command line args of its own (tc.args with the
// flags a case puts around them) that reads stdin.
func (tc cliCase) checkRun(t *testing.T, stdin string, args []string) string {
	t.Helper()
	code, out, stderr := run(t, stdin, args...)
	if code != tc.wantCode {
		t.Errorf("Run(%q) = %d, want %d (stderr %q)", tc.args, code, tc.wantCode, stderr)
	}
	if !strings.Contains(out, tc.wantOut) {
		t.Errorf("Run(%q) stdout = %q, want it to contain %q", tc.args, out, tc.wantOut)
	}
	if !strings.Contains(stderr, tc.wantStderr) {
		t.Errorf("Run(%q) stderr = %q, want it to contain %q", tc.args, stderr, tc.wantStderr)
	}
	return stderr
}
