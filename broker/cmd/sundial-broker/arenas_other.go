//go:build !linux || !cgo

package main

// setMallocArenas does nothing: without cgo the state DB and the Raft log
// allocate from the Go heap, and elsewhere the C library is not glibc.
func setMallocArenas(int) bool { return false }
