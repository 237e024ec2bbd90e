// Package framework runs a Sundial cluster of real processes for tests: the
// sundial-broker and sundial-proxy binaries, on loopback ports, with data
// dirs and logs under t.TempDir() (the logs of a failed test, and the
// histories tests write with KeepHistory, kept in a KeepDir), and injects
// faults into it.
//
// What it owns:
//   - Ports: MustFreeAddr, over proc.FreeAddr (loopback ports 20000-31999,
//     below Linux's ephemeral range, an flock held per port, so test
//     processes running at once never hand out the same port).
//   - Binaries: the broker and proxy binaries from the repository's bin/
//     when they are newer than every source file they are built from, else
//     built once per test process with go build.
//   - Processes: each broker and proxy is a proc.Process (its log,
//     SIGKILL, SIGSTOP/SIGCONT, stop by pid).
//   - Forwarder: a TCP proxy in front of each broker's Raft and gRPC ports.
//     Peers and proxies dial the forwarder (brokers advertise it), so the
//     tests can cut or slow a link. Each accepted connection is traced back
//     to the process that dialled it (/proc/net/tcp and /proc/PID/fd), so a
//     partition between two chosen brokers is possible on one loopback.
//   - Cluster: N brokers and M proxies with fault hooks (Kill, Restart,
//     Pause, Resume, Isolate, Partition, Slow, CutGRPC, Heal; KillProxy,
//     RestartProxy; TransferLeader, through the public Cluster API).
//   - WaitFor: proc.Poll for a testing.TB (fails the test on timeout).
//
// Goroutines: each proc.Process owns its reaper; each Forwarder owns an accept
// loop and two copy goroutines per connection. Cluster.Stop (registered
// with t.Cleanup) ends them all. A Cluster's fault hooks may be called from
// any goroutine.
package framework
