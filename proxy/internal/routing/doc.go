// Package routing owns the proxy's view of the cluster: the newest routing
// table streamed by the brokers (Cluster.WatchRouting), the consistent hash
// ring built from its shard set, the partition counts of topics the table
// does not list yet (Topics, asked from meta and remembered briefly), and
// one gRPC client connection per broker address.
//
// A Table is an immutable snapshot; the Watcher swaps in a new one
// atomically, so request goroutines read it without locks. The Watcher's
// single goroutine (started by Start, joined by Stop) is the only writer.
// The Pool and Topics are safe for concurrent use; each mutex guards its
// map.
package routing
