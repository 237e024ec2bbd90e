// Package tlsfiles owns the transport security settings Sundial's servers
// share: the rule that a server without TLS listens only on loopback
// addresses unless it is started insecure (see Loopback and Exposed).
//
// Its functions are pure and safe for concurrent use.
package tlsfiles
