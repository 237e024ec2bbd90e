package main

import "testing"

func TestLimitMallocArenasLeavesTheOperatorsVariables(t *testing.T) {
	none := func(string) (string, bool) { return "", false }
	for _, tc := range []struct {
		name   string
		n      int
		lookup func(string) (string, bool)
	}{
		{"zero keeps the C library's default", 0, none},
		{"MALLOC_ARENA_MAX set", 2, func(k string) (string, bool) { return "8", k == "MALLOC_ARENA_MAX" }},
		{"GLIBC_TUNABLES set", 2, func(k string) (string, bool) { return "glibc.malloc.arena_max=4", k == "GLIBC_TUNABLES" }},
	} {
		if limitMallocArenas(tc.n, tc.lookup) {
			t.Errorf("%s: limitMallocArenas(%d) set the cap", tc.name, tc.n)
		}
	}
}
