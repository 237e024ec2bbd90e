// Package service serves a broker's gRPC API: the internal Shard service the
// proxies forward to, and the Admin and Cluster services. Handlers run on
// gRPC's goroutines; they hold no state of their own beyond metrics and reach
// the host through its small types (host.MetaClient for the meta group,
// host.Replicas for who leads which shard, host.Moves for membership and
// leadership changes); calls to other brokers go over the broker's peer
// connections (Options.Peers, package peer). They read shard state only through
// broker/internal/query (never Pebble or the key layout), check requests
// only through proto/validate, and convert domain results to protos.
//
// Cluster control is not theirs: the Cluster service's node and operation
// RPCs (nodes.go, rebalance.go, operations.go) check and record requests
// and call package operator for the decisions of cluster control (the
// meta-voter policy, whether a node answers, the healer's suspects); the
// executor and the healer run there. Services call operator, never the
// other way round.
//
// errors.go is the one boundary translator (StatusOf). Handlers return
// their domain errors as they are (wrapped with %w where they add context)
// and never translate them; Boundary (boundary.go), the server's unary and
// stream interceptors, applies StatusOf to every handler's error, so domain
// and Dragonboat errors become status codes with typed details and nothing
// reaches a caller as codes.Unknown; it also recovers a handler's panic into
// codes.Internal, counted and logged with its stack. A handler called
// directly (as the package's tests do) answers the domain error: StatusOf
// gives the status a client would see.
package service
