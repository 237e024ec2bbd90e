#!/usr/bin/env bash
# install-peers.sh — install the peer systems loadtest compares Sundial with:
# redis-server and beanstalkd from Debian, nats-server v2.12 (message
# scheduling) with go install. Idempotent: whatever is already on PATH (or in
# bin/tools for nats-server) is skipped. Run by `make bench-peers`.
#
# Environment:
#   NATS_SERVER_VERSION=v2.12.15   version passed to go install
#   GOBIN_DIR=<repo>/bin/tools     where go install puts nats-server
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
nats_version=${NATS_SERVER_VERSION:-v2.12.15}
gobin=${GOBIN_DIR:-$PWD/bin/tools}
export PATH="$gobin:$HOME/go/bin:$PATH"

say() { echo "install-peers: $*" >&2; }

apt_pkgs=()
command -v redis-server >/dev/null 2>&1 || apt_pkgs+=(redis-server)
command -v beanstalkd >/dev/null 2>&1 || apt_pkgs+=(beanstalkd)
if ((${#apt_pkgs[@]} > 0)); then
	if [[ $(id -u) != 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
		say "missing ${apt_pkgs[*]}: install them with your package manager (needs root and apt-get here)"
		exit 1
	fi
	say "installing ${apt_pkgs[*]} with apt-get"
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${apt_pkgs[@]}" ||
		{ apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${apt_pkgs[@]}"; }
	# Debian's packages start no service here (no systemd); loadtest starts its own.
else
	say "redis-server and beanstalkd present"
fi

want=${nats_version#v}
have=""
if command -v nats-server >/dev/null 2>&1; then
	have=$(nats-server --version 2>/dev/null | sed -n 's/.*v\([0-9.]*\).*/\1/p')
fi
if [[ $have == 2.12.* || $have == 2.1[3-9].* ]]; then
	say "nats-server $have present ($(command -v nats-server))"
else
	[[ -n $have ]] && say "nats-server $have on PATH lacks message scheduling (needs >= 2.12)"
	say "go install github.com/nats-io/nats-server/v2@$nats_version into $gobin"
	mkdir -p "$gobin"
	GOBIN=$gobin go install "github.com/nats-io/nats-server/v2@$nats_version"
	say "nats-server $want installed: $gobin/nats-server"
fi
