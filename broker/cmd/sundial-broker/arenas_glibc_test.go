//go:build linux && cgo

package main

import "testing"

func TestLimitMallocArenasSetsTheCap(t *testing.T) {
	if !limitMallocArenas(2, func(string) (string, bool) { return "", false }) {
		t.Fatal("limitMallocArenas(2) = false: mallopt(M_ARENA_MAX) refused")
	}
}
