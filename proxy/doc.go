// Package proxy is the public face of sundial-proxy, the stateless tier
// clients talk to. It serves the public gRPC API (Producer, Consumer,
// Admin, Cluster, Auth, Backups), gRPC reflection and health on
// Config.GRPCAddr, and the same API as HTTP/JSON (internal/httpapi:
// /v1/..., /openapi.json, /docs), the admin UI under /ui/ (internal/ui, a
// client of the proxy's own gRPC listener), /metrics, /livez, /readyz and
// /healthz (an alias of /readyz) on Config.HTTPAddr. Readiness (health.go) is probed every
// Config.ReadyProbeInterval: a routing table, a routing watch that heard
// its broker within Config.WatchSilenceTimeout, and the leader of every
// event shard reached; the gRPC health service answers the same at the
// moment it is asked.
//
// The proxy holds no durable state. It follows the routing table streamed
// by the brokers (internal/routing), hashes topic/partition onto event
// shards with a consistent hash ring (proto/ring, shared with the brokers), splits publish
// batches by shard as a pure function of the request id (internal/batch:
// a retry, through any proxy, sends each shard the same part under the
// dedup id "<request id>/<shard>"; a request without an id is not
// deduplicated), forwards each part to the shard's leader with one retry
// policy built on apierr.Classify (internal/forward), merges the deliveries
// of a subscription's shards into one stream (internal/subscribe) and
// routes acks back by receipt (internal/ack).
//
// Calls about one message (Cancel, Reschedule, GetMessage) go to one
// shard: by key, the shard of partition xxhash(key) mod partitions; by id,
// the shard inside the id. Topic-wide calls (Receive, stats in GetTopic
// and ListGroups, PurgeTopic, DeleteTopic, CreateGroup, DeleteGroup,
// ListMessages, DueHistogram, RedriveDeadLetters) fan out to every shard
// holding a partition of the topic, each told its partitions, and their
// answers are merged by internal/fanout. A dead-letter topic "<t>.dlq"
// routes like "<t>": brokers keep the dead letters of partition p with p.
// Cluster, Auth and Backups calls go to any broker (admin.go, backups.go:
// a call that must not run twice reaches one broker at most).
//
// Lifecycle: New builds a Server; Start listens and starts the routing
// watcher and the gRPC and HTTP servers, each on a goroutine owned by the
// Server; Stop stops them all and waits for them. The same Server runs in
// cmd/sundial-proxy and in tests.
package proxy
