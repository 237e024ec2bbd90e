// Package routing owns the proxy's view of the cluster: the newest routing
// table streamed by the brokers (Cluster.WatchRouting), the consistent hash
// ring built from its shard set, the partition counts of topics the table
// does not list yet (Topics, asked from meta and remembered briefly), and
// one gRPC client connection per broker address.
//
// A Table is an immutable snapshot; the Watcher swaps in a new one
// atomically, so request goroutines read it without locks. The Watcher's
// goroutine (started by Start, joined by Stop) is the only writer; it
// runs one receiver goroutine per watch stream, joined before it opens the
// next. A broker that promised progress frames and sends nothing for the
// silence bound is left for another (the table is kept), and Stale says
// so meanwhile; every wait of the watcher runs on its Clock.
// The Pool and Topics are safe for concurrent use; each mutex guards its
// map.
package routing
