// Package routing owns the proxy's view of the cluster: the newest routing
// table streamed by the brokers (Cluster.WatchRouting), the consistent hash
// ring built from its shard set, and one gRPC client connection per broker
// address.
//
// A Table is an immutable snapshot; the Watcher swaps in a new one
// atomically, so request goroutines read it without locks. The Watcher's
// single goroutine (started by Start, joined by Stop) is the only writer.
// The Pool is safe for concurrent use; its mutex guards the connection map.
package routing
