#!/usr/bin/env bash
# run-local.sh — run a Sundial cluster on loopback from the binaries in bin/.
#
# Started by `make run` (which builds first). Starts 3 brokers and 1 proxy with the
# ports of DESIGN §5, waits until the proxy's /readyz answers 200 (it has a routing
# table and reaches the leader of every shard), prints the endpoints, and then
# waits. Ctrl-C (or SIGTERM) stops every process it started, by pid: TERM, then
# KILL after 10 s. If a process dies early, the tail of its log is
# printed and the rest are stopped.
#
# Ports (i = broker 1..N): broker gRPC 7500+i, Raft 7600+i, metrics 7700+i;
# proxy gRPC 7400, proxy HTTP 7480.
#
# Environment (read here and removed before the servers start, so the servers'
# own SUNDIAL_* configuration overrides never see them):
#   SUNDIAL_BROKERS=3        number of brokers, 1..9 (1 = single node, replication factor 1)
#   SUNDIAL_SHARDS=8         event shards created when the cluster is bootstrapped
#   SUNDIAL_LOG_LEVEL=info   log level of every process
#   SUNDIAL_LOCAL_DIR        data directory; default ./data/local for 3 brokers and
#                            ./data/local-N for N != 3 (a cluster's data only fits the
#                            same member list, so each shape keeps its own directory)
#   SUNDIAL_START_TIMEOUT=60 seconds to wait for the proxy's /readyz
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

brokers=${SUNDIAL_BROKERS:-3}
shards=${SUNDIAL_SHARDS:-8}
log_level=${SUNDIAL_LOG_LEVEL:-info}
start_timeout=${SUNDIAL_START_TIMEOUT:-60}
if [[ $brokers == 3 ]]; then
	default_dir=./data/local
else
	default_dir=./data/local-$brokers
fi
data=${SUNDIAL_LOCAL_DIR:-$default_dir}
unset SUNDIAL_BROKERS SUNDIAL_SHARDS SUNDIAL_LOG_LEVEL SUNDIAL_LOCAL_DIR SUNDIAL_START_TIMEOUT

die() { echo "run-local: $*" >&2; exit 1; }

[[ $brokers =~ ^[1-9]$ ]] || die "SUNDIAL_BROKERS must be 1..9, got '$brokers'"
[[ $shards =~ ^[1-9][0-9]*$ ]] || die "SUNDIAL_SHARDS must be a positive number, got '$shards'"
[[ $start_timeout =~ ^[1-9][0-9]*$ ]] || die "SUNDIAL_START_TIMEOUT must be a positive number of seconds"
for b in sundial-broker sundial-proxy; do
	[[ -x bin/$b ]] || die "bin/$b is missing: run 'make build' (or 'make run')"
done

proxy_grpc=127.0.0.1:7400
proxy_http=127.0.0.1:7480
broker_grpc() { echo "127.0.0.1:$((7500 + $1))"; }
broker_raft() { echo "127.0.0.1:$((7600 + $1))"; }
broker_metrics() { echo "127.0.0.1:$((7700 + $1))"; }

# port_open HOST:PORT — true when something accepts connections there.
port_open() {
	local host=${1%:*} port=${1##*:}
	(exec 3<>"/dev/tcp/$host/$port") 2>/dev/null
}

# http_status HOST:PORT PATH — prints the HTTP status code, or "down".
http_status() {
	local host=${1%:*} port=${1##*:} line
	if ! { exec 3<>"/dev/tcp/$host/$port"; } 2>/dev/null; then
		echo down
		return
	fi
	printf 'GET %s HTTP/1.0\r\nHost: %s\r\nConnection: close\r\n\r\n' "$2" "$1" >&3
	if IFS=' ' read -r -t 3 _ line _ <&3 && [[ $line =~ ^[0-9]{3}$ ]]; then
		echo "$line"
	else
		echo "no-answer"
	fi
	exec 3<&- 3>&-
}

# The member list every broker bootstraps with: id=raft-addr@grpc-addr.
members=""
broker_list=""
for ((i = 1; i <= brokers; i++)); do
	members+="${members:+,}$i=$(broker_raft "$i")@$(broker_grpc "$i")"
	broker_list+="${broker_list:+,}$(broker_grpc "$i")"
done

# A data directory belongs to one member list: refuse to mix shapes.
mkdir -p "$data/logs"
shape_file=$data/cluster-members
if [[ -f $shape_file ]]; then
	old=$(<"$shape_file")
	[[ $old == "$members" ]] || die "$data holds a cluster with members '$old', not '$members'.
Use another directory (SUNDIAL_LOCAL_DIR=...) or remove it: rm -rf $data"
else
	echo "$members" >"$shape_file"
fi

busy=()
for addr in "$proxy_grpc" "$proxy_http"; do port_open "$addr" && busy+=("$addr"); done
for ((i = 1; i <= brokers; i++)); do
	for addr in "$(broker_grpc "$i")" "$(broker_raft "$i")" "$(broker_metrics "$i")"; do
		port_open "$addr" && busy+=("$addr")
	done
done
if ((${#busy[@]} > 0)); then
	hint=""
	[[ -s $data/run.pids ]] && hint="
The last run started these processes (pid name): $(tr '\n' ' ' <"$data/run.pids")"
	die "already in use: ${busy[*]} (is another 'make run' still running?)$hint"
fi

# Each child runs in its own session (setsid), so a Ctrl-C in the terminal reaches only
# this script, which then stops the children in order with one TERM each. setsid does
# not fork here (a background child is no process-group leader), so $! is the server.
detach=()
command -v setsid >/dev/null 2>&1 && detach=(setsid)
pid_file=$data/run.pids
: >"$pid_file"

pids=()
names=()
logs=()
stopping=0

# start NAME LOG CMD... — start a child in the background, output to LOG.
start() {
	local name=$1 log=$2
	shift 2
	[[ -f $log ]] && mv -f "$log" "$log.1"
	echo "# $(date -u +%FT%TZ) $*" >"$log"
	"${detach[@]}" "$@" </dev/null >>"$log" 2>&1 &
	pids+=("$!")
	echo "$! $name" >>"$pid_file"
	names+=("$name")
	logs+=("$log")
	echo "started $name (pid $!), log $log"
}

alive() { kill -0 "$1" 2>/dev/null; }

# stop_all — TERM every child still running, KILL what is left after 10 s.
stop_all() {
	local i pid deadline left
	for i in "${!pids[@]}"; do
		pid=${pids[$i]}
		alive "$pid" && kill -TERM "$pid" 2>/dev/null && echo "stopping ${names[$i]} (pid $pid)"
	done
	deadline=$((SECONDS + 10))
	while :; do
		left=()
		for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
		((${#left[@]} == 0)) && break
		if ((SECONDS >= deadline)); then
			echo "still running after 10 s, sending KILL to: ${left[*]}"
			kill -KILL "${left[@]}" 2>/dev/null || true
			break
		fi
		sleep 0.2
	done
	wait 2>/dev/null || true
	: >"$pid_file"
}

on_signal() {
	trap '' INT TERM HUP
	stopping=1
	echo
	echo "run-local: stopping the cluster"
	stop_all
	echo "run-local: stopped; data kept in $data"
	exit 0
}
trap on_signal INT TERM HUP
trap '((stopping)) || stop_all' EXIT

# report_dead — print which children died, with the tail of their logs.
report_dead() {
	local i
	for i in "${!pids[@]}"; do
		if ! alive "${pids[$i]}"; then
			echo "run-local: ${names[$i]} (pid ${pids[$i]}) exited; last lines of ${logs[$i]}:" >&2
			tail -n 30 "${logs[$i]}" | sed 's/^/    /' >&2
		fi
	done
}

any_dead() {
	local pid
	for pid in "${pids[@]}"; do alive "$pid" || return 0; done
	return 1
}

echo "Sundial local cluster: $brokers broker(s), $shards shards at bootstrap, data in $data"
for ((i = 1; i <= brokers; i++)); do
	mkdir -p "$data/broker-$i"
	start "broker-$i" "$data/logs/broker-$i.log" \
		bin/sundial-broker \
		--node-id "$i" \
		--grpc-addr "$(broker_grpc "$i")" \
		--raft-addr "$(broker_raft "$i")" \
		--metrics-addr "$(broker_metrics "$i")" \
		--data-dir "$data/broker-$i" \
		--initial-members "$members" \
		--shards "$shards" \
		--log-level "$log_level"
done
start proxy "$data/logs/proxy.log" \
	bin/sundial-proxy \
	--grpc-addr "$proxy_grpc" \
	--http-addr "$proxy_http" \
	--brokers "$broker_list" \
	--log-level "$log_level"

# Wait for the proxy to report ready, showing every process's /readyz meanwhile.
started=$SECONDS
next_report=$((SECONDS + 2))
while :; do
	if any_dead; then
		report_dead
		echo "run-local: a process exited during start-up; stopping the others" >&2
		stop_all
		stopping=1
		exit 1
	fi
	proxy_state=$(http_status "$proxy_http" /readyz)
	[[ $proxy_state == 200 ]] && break
	if ((SECONDS - started >= start_timeout)); then
		echo "run-local: the proxy's /readyz is not 200 after ${start_timeout}s (last: $proxy_state)" >&2
		for i in "${!logs[@]}"; do
			echo "--- last lines of ${logs[$i]}:" >&2
			tail -n 15 "${logs[$i]}" | sed 's/^/    /' >&2
		done
		echo "run-local: stopping the cluster (raise SUNDIAL_START_TIMEOUT to wait longer)" >&2
		stop_all
		stopping=1
		exit 1
	fi
	if ((SECONDS >= next_report)); then
		line="waiting for http://$proxy_http/readyz ($((SECONDS - started))s/${start_timeout}s): proxy=$proxy_state"
		for ((i = 1; i <= brokers; i++)); do
			line+=" broker-$i=$(http_status "$(broker_metrics "$i")" /readyz)"
		done
		echo "$line"
		next_report=$((SECONDS + 3))
	fi
	sleep 0.5
done

cat <<EOF

Sundial is up after $((SECONDS - started))s ($brokers broker(s), data in $data, logs in $data/logs).

  proxy     gRPC $proxy_grpc   HTTP http://$proxy_http  (/livez, /readyz, /metrics)
EOF
for ((i = 1; i <= brokers; i++)); do
	printf '  broker-%d  gRPC %s   metrics http://%s/metrics   raft %s\n' \
		"$i" "$(broker_grpc "$i")" "$(broker_metrics "$i")" "$(broker_raft "$i")"
done
cat <<EOF

Try it from another shell:
  bin/shardctl publish --topic demo --delay 5s hello
  bin/shardctl consume --topic demo
  bin/shardctl status
  grpcurl -plaintext $proxy_grpc list

Ctrl-C stops the cluster; the data stays in $data for the next 'make run' ('make clean' removes it).
EOF

# Wait for a signal or for a child to exit on its own.
while :; do
	wait -n "${pids[@]}" 2>/dev/null || true
	((stopping)) && exit 0
	if any_dead; then
		report_dead
		echo "run-local: a process exited; stopping the others" >&2
		stop_all
		stopping=1
		exit 1
	fi
done
