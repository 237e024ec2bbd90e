//go:build linux && cgo

package main

/*
#include <malloc.h>
*/
import "C"

// setMallocArenas is mallopt(M_ARENA_MAX, n); glibc answers 1 on success.
func setMallocArenas(n int) bool {
	return C.mallopt(C.M_ARENA_MAX, C.int(n)) == 1
}
