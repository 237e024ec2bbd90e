#!/usr/bin/env bash
# check-tree.sh — refuse tracked files that do not belong in the repository:
# compiled binaries, and anything over MAX_FILE_BYTES (default 1 MiB). A committed
# binary once made a whole submission too large to land; this check runs in
# `make verify` and CI so it cannot happen unnoticed again.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
max=${MAX_FILE_BYTES:-1048576}
bad=0
while IFS= read -r -d '' f; do
	[[ -f $f ]] || continue
	size=$(stat -c %s -- "$f")
	if ((size > max)); then
		echo "check-tree: $f is $size bytes (limit $max): keep large files out of git"
		bad=1
	fi
	if [[ $(head -c 4 -- "$f" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]]; then
		echo "check-tree: $f is a compiled binary: build it, don't commit it (bin/ is ignored)"
		bad=1
	fi
done < <(git ls-files -z)
if ((bad)); then exit 1; fi
echo "check-tree: OK (no binaries, no file over $max bytes)"
