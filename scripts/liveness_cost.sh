#!/usr/bin/env bash
# liveness_cost.sh measures what the liveness refreshes of many workers cost
# the PostgreSQL server: each worker runs `SELECT fila_worker_seen(id)` every
# liveness interval (5 s by default), one UPDATE of its row in fila_workers.
#
#   scripts/liveness_cost.sh [WORKERS [INTERVAL_S [SECONDS]]]   (1000 5 60)
#
# It starts a throwaway PostgreSQL of its own (the installed binaries, a
# temporary directory, port 5499), so that no other work on the machine is
# counted, migrates it, writes WORKERS rows in fila_workers, and has pgbench
# refresh them at WORKERS/INTERVAL_S statements a second from 8 connections
# for SECONDS. It prints the rate reached, the server's CPU (every process of
# the throwaway cluster, from /proc) over the same length of time idle and
# under the refreshes, and the WAL written. The same with a plain UPDATE
# (whose commit waits for the WAL flush) is printed for comparison.
#
# Run as root it runs PostgreSQL as the postgres user.
set -euo pipefail
cd "$(dirname "$0")/.."

WORKERS=${1:-1000}
INTERVAL=${2:-5}
SECS=${3:-60}
PORT=5499
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
DIR=$(mktemp -d /tmp/fila-liveness-cost.XXXXXX)
chmod 755 "$DIR"
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
[ "$(id -u)" = 0 ] && chown postgres "$DIR"
cleanup() { as_pg "$BIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true; rm -rf "$DIR"; }
trap cleanup EXIT

as_pg "$BIN/initdb" -D "$DIR/data" -U postgres -A trust >/dev/null
as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w \
	-o "-p $PORT -k $DIR -c listen_addresses=127.0.0.1 -c shared_buffers=128MB" start >/dev/null
DSN="postgres://postgres@127.0.0.1:$PORT/postgres"
go run ./cmd/fila --dsn "$DSN" migrate >/dev/null 2>&1
psql -qX "$DSN" -c "INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, liveness_interval)
	SELECT 'host-' || i || '/' || i || '/0123abcd', 'host-' || i, i, '{default}', '{k}', 'notify', 'up', make_interval(secs => $INTERVAL)
	FROM generate_series(1, $WORKERS) i"

postmaster=$(head -1 "$DIR/data/postmaster.pid")
# cpu_ticks sums utime+stime (clock ticks) of the postmaster and its children.
cpu_ticks() {
	local total=0 pid
	for pid in $postmaster $(cat /proc/"$postmaster"/task/*/children 2>/dev/null); do
		if [ -r /proc/"$pid"/stat ]; then
			total=$((total + $(awk '{print $14 + $15}' /proc/"$pid"/stat)))
		fi
	done
	echo "$total"
}
wal() { psql -qXAt "$DSN" -c "SELECT pg_current_wal_lsn()"; }
commits() { psql -qXAt "$DSN" -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'postgres'"; }
hz=$(getconf CLK_TCK)

rate=$(( (WORKERS + INTERVAL - 1) / INTERVAL ))
echo "$WORKERS workers, one refresh each every ${INTERVAL}s: $rate statements/s for ${SECS}s, PostgreSQL $("$BIN/postgres" --version | awk '{print $3}')"

idle0=$(cpu_ticks); sleep "$SECS"; idle1=$(cpu_ticks)
printf '%-34s %s ms/s of server CPU\n' "idle" "$(( (idle1 - idle0) * 1000 / hz / SECS ))"

run() { # run LABEL SQL
	local label=$1 sql=$2 c0 c1 w0 w1 x0 x1
	printf '\\set id random(1, %d)\n%s\n' "$WORKERS" "$sql" >"$DIR/script.sql"
	# Connections open and warm before the window.
	pgbench -n -f "$DIR/script.sql" -c 8 -j 2 -T 2 "$DSN" >"$DIR/warm.out" 2>&1 || { cat "$DIR/warm.out"; exit 1; }
	pgbench -n -f "$DIR/script.sql" -R "$rate" -c 8 -j 2 -T "$((SECS + 4))" "$DSN" >"$DIR/pgbench.out" 2>&1 &
	local bench=$!
	sleep 2
	c0=$(cpu_ticks); w0=$(wal); x0=$(commits)
	sleep "$SECS"
	c1=$(cpu_ticks); w1=$(wal); x1=$(commits)
	wait "$bench"
	local bytes
	bytes=$(psql -qXAt "$DSN" -c "SELECT pg_wal_lsn_diff('$w1', '$w0')::bigint")
	printf '%-34s %s tx/s, %s ms/s of server CPU, %s kB/s of WAL; pgbench: %s\n' "$label" \
		"$(( (x1 - x0) / SECS ))" "$(( (c1 - c0) * 1000 / hz / SECS ))" "$(( bytes / 1024 / SECS ))" \
		"$(grep -E '^latency average' "$DIR/pgbench.out" | sed 's/^latency average = //')"
}
run "fila_worker_seen (async commit)" "SELECT fila_worker_seen('host-' || :id || '/' || :id || '/0123abcd');"
run "plain UPDATE (commit waits)" "UPDATE fila_workers SET last_seen_at = now() WHERE id = 'host-' || :id || '/' || :id || '/0123abcd';"
