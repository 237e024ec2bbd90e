package main

// limitMallocArenas caps the C allocator's arenas at n, before the state
// DB or the Raft log allocate anything, unless n is 0 or the operator set
// the allocator's own variables (lookup is os.LookupEnv). It reports
// whether the cap was set.
func limitMallocArenas(n int, lookup func(string) (string, bool)) bool {
	if n <= 0 {
		return false
	}
	for _, v := range []string{"MALLOC_ARENA_MAX", "GLIBC_TUNABLES"} {
		if _, set := lookup(v); set {
			return false
		}
	}
	return setMallocArenas(n)
}
