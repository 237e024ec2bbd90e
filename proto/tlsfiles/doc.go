// Package tlsfiles owns the transport security settings Sundial's servers
// and their clients share:
//
//   - the rule that a server without TLS listens only on loopback addresses
//     unless it is started insecure (Loopback, RequireLoopback);
//   - a Source of TLS material read from files (a certificate, its key, a
//     CA bundle) that is reloaded when the files change, without a restart:
//     every new handshake, server or client side, takes the files' current
//     contents, checked at most once per CheckInterval. A reload that fails
//     (a missing, unparsable or mismatched file, as during a rotation that
//     has written the certificate but not yet the key) keeps the material
//     loaded before, is logged and counted, and is tried again at the next
//     check.
//
// A Source is safe for concurrent use: handshakes on any goroutine read it,
// and the one that finds the files changed reloads them under its mutex.
// It starts no goroutine.
package tlsfiles
