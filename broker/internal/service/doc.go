// Package service serves a broker's gRPC API: the internal Shard service the
// proxies forward to, and the Admin and Cluster services. Handlers run on
// gRPC's goroutines; they hold no state of their own beyond metrics and reach
// everything through the host.
//
// errors.go is the one boundary translator: every handler returns through
// it, so domain and Dragonboat errors become status codes with typed
// details, and nothing reaches a caller as codes.Unknown.
package service
