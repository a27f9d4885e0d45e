#!/usr/bin/env bash
# setup.sh prepares a machine to run Fila's test suite and benchmarks.
#
# It is idempotent: run it as often as you like; a second run changes nothing.
# It is written for Debian bookworm run as root (as CI does on a clean clone);
# as another user it uses sudo for the steps that need root.
#
# Steps, one line of output each:
#   1. PostgreSQL answers on 127.0.0.1:5432 (installed with apt and started
#      with pg_ctlcluster when missing or stopped), and postgres@127.0.0.1
#      connects without a password (the tests' default DSN).
#   2. wal_level = logical, max_replication_slots >= 10 and
#      max_wal_senders >= 10, needed by the logical replication wake source;
#      max_connections >= 300 for the suite's parallel tests.
#      Set with ALTER SYSTEM; PostgreSQL is restarted only when one changed.
#   3. pgbouncer is installed (Debian package). Services are forbidden to
#      start during the install, so no system PgBouncer takes port 6432.
#   4. A shared PgBouncer for the test suite answers on 127.0.0.1:6432 in
#      transaction mode in front of 127.0.0.1:5432. Its config, pid and log
#      live under ${TMPDIR:-/tmp}/fila-pgbouncer/; it runs as the postgres
#      user under a supervisor that starts it again whenever it exits, and
#      records each exit in exits.log there (scripts/test.sh reports them).
#      A running one is reloaded only if its config changed.
#   5. go mod download for the main module (and bench/peers when it has a go.mod);
#      Node.js 20 or later (Debian's nodejs and npm when node is missing), and
#      `npm ci` in bench/peers/node when its node_modules is missing or older
#      than its package-lock.json (graphile-worker and pg-boss, for the peers
#      benchmark and its tests).
#   6. chromium is installed (Debian package), for the dashboard's browser
#      test (internal/ui), which drives it headless.
#   7. patroni and etcd-server are installed (Debian packages, with
#      python3-etcd for Patroni's etcd client), for the high-availability
#      scenarios (internal/patroni starts a throwaway etcd and two Patroni
#      nodes per test). Services are forbidden to start during the install,
#      and a system etcd or Patroni that runs anyway is stopped and disabled,
#      so none holds ports 2379 or 8008. Patroni runs on Debian's
#      /usr/bin/python3 (its shebang), whatever python3 comes first on PATH.
#
# The addresses are fixed (PostgreSQL 127.0.0.1:5432, PgBouncer 127.0.0.1:6432)
# because the test suite's defaults name them: see internal/testdb and
# scripts/test.sh.
set -euo pipefail

cd "$(dirname "$0")/.."

PG_HOST=127.0.0.1
PG_PORT=5432
BOUNCER_PORT=6432
PG_URL="postgres://postgres@${PG_HOST}:${PG_PORT}/postgres"
BOUNCER_URL="postgres://postgres@${PG_HOST}:${BOUNCER_PORT}/postgres"
BOUNCER_DIR="${TMPDIR:-/tmp}/fila-pgbouncer"

step() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# as_root runs a command as root (directly, or with sudo for other users).
as_root() {
	if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

# as_pg runs a command as the postgres system user when we are root
# (PostgreSQL and PgBouncer refuse to run as root), else as ourselves.
as_pg() {
	if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# apt_install installs Debian packages without starting their services:
# a temporary policy-rc.d forbids service starts unless one already exists.
apt_install() {
	local policy=/usr/sbin/policy-rc.d created=""
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
		as_root chmod 755 "$policy"
		created=1
	fi
	# apt's chatter goes to a log that is shown only when it fails.
	local rc=0 log
	log=$(mktemp)
	as_root apt-get update -qq >"$log" 2>&1 || rc=$?
	if [ "$rc" -eq 0 ]; then
		as_root env DEBIAN_FRONTEND=noninteractive \
			apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 || rc=$?
	fi
	if [ -n "$created" ]; then as_root rm -f "$policy"; fi
	if [ "$rc" -ne 0 ]; then cat "$log" >&2; fi
	rm -f "$log"
	return "$rc"
}

pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -1; }

pg_ready() { pg_isready -q -h "$PG_HOST" -p "$PG_PORT" >/dev/null 2>&1; }

# wait_for runs a command until it succeeds, for at most $1 seconds.
wait_for() {
	local limit=$1; shift
	local deadline=$((SECONDS + limit))
	until "$@"; do
		if [ "$SECONDS" -ge "$deadline" ]; then return 1; fi
		sleep 0.2
	done
}

psql_pg() { psql "$PG_URL" -XAtq -v ON_ERROR_STOP=1 "$@"; }

# --- 1. PostgreSQL running on 127.0.0.1:5432 ---------------------------------
if [ -z "$(pg_version)" ] || ! command -v pg_ctlcluster >/dev/null; then
	apt_install postgresql postgresql-client || die "could not install postgresql"
	step "postgresql: installed $(pg_version)"
fi
PG_VERSION=$(pg_version)
[ -n "$PG_VERSION" ] || die "no cluster under /etc/postgresql"

if pg_ready; then
	step "postgresql: running on ${PG_HOST}:${PG_PORT}"
else
	as_root pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start
	wait_for 60 pg_ready || die "postgresql ${PG_VERSION}/main did not answer on ${PG_HOST}:${PG_PORT}"
	step "postgresql: started ${PG_VERSION}/main on ${PG_HOST}:${PG_PORT}"
fi

if ! psql_pg -c 'select 1' >/dev/null 2>&1; then
	# The tests connect as postgres over loopback without a password (Debian's
	# default asks for one): trust that one user on loopback only.
	hba=$(as_pg psql -XAtq -c 'show hba_file') || die "cannot reach postgresql as the postgres user"
	as_root sed -i "1i host all postgres 127.0.0.1/32 trust # added by fila scripts/setup.sh" "$hba"
	as_pg psql -XAtq -c 'select pg_reload_conf()' >/dev/null
	psql_pg -c 'select 1' >/dev/null || die "postgres@${PG_HOST}:${PG_PORT} still refuses to connect"
	step "postgresql: trusted postgres@127.0.0.1 in $hba"
fi

# --- 2. settings for logical replication --------------------------------------
changed=()
wal_level=$(psql_pg -c 'show wal_level')
if [ "$wal_level" != logical ]; then
	psql_pg -c 'alter system set wal_level = logical' >/dev/null
	changed+=("wal_level ${wal_level} -> logical")
fi
# max_connections: the suite runs two packages at once, each with parallel
# tests that start several runtimes (a pool and a listener each); the default
# 100 runs out.
for setting in max_replication_slots:10 max_wal_senders:10 max_connections:300; do
	name=${setting%%:*} want=${setting##*:}
	value=$(psql_pg -c "show ${name}")
	if [ "$value" -lt "$want" ]; then
		psql_pg -c "alter system set ${name} = ${want}" >/dev/null
		changed+=("${name} ${value} -> ${want}")
	fi
done
if [ "${#changed[@]}" -eq 0 ]; then
	step "postgresql: wal_level=logical, max_replication_slots and max_wal_senders >= 10, max_connections >= 300 already"
else
	as_root pg_ctlcluster --skip-systemctl-redirect -m fast "$PG_VERSION" main restart
	wait_for 60 pg_ready || die "postgresql did not come back after the restart"
	[ "$(psql_pg -c 'show wal_level')" = logical ] || die "wal_level is still not logical after the restart"
	step "postgresql: set $(IFS=,; echo "${changed[*]}" | sed 's/,/, /g'); restarted ${PG_VERSION}/main"
fi

# --- 3. pgbouncer installed ---------------------------------------------------
find_pgbouncer() {
	command -v pgbouncer 2>/dev/null || { [ -x /usr/sbin/pgbouncer ] && echo /usr/sbin/pgbouncer; }
}
PGBOUNCER=$(find_pgbouncer || true)
if [ -n "$PGBOUNCER" ]; then
	step "pgbouncer: installed ($("$PGBOUNCER" --version | head -1))"
else
	apt_install pgbouncer || die "could not install pgbouncer"
	PGBOUNCER=$(find_pgbouncer) || die "pgbouncer installed but not found"
	# Should a service have started anyway (no policy-rc.d honoured), stop it
	# and keep it off so it never fights the shared PgBouncer for port 6432.
	if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
		as_root systemctl disable --now pgbouncer >/dev/null 2>&1 || true
	fi
	if [ -f /run/postgresql/pgbouncer.pid ]; then
		as_root /etc/init.d/pgbouncer stop >/dev/null 2>&1 || true
	fi
	step "pgbouncer: installed ($("$PGBOUNCER" --version | head -1)), system service not running"
fi

# --- 4. shared PgBouncer on 127.0.0.1:6432 ------------------------------------
bouncer_ok() { psql "$BOUNCER_URL" -XAtq -c 'select 1' >/dev/null 2>&1; }

mkdir -p "$BOUNCER_DIR"
if [ "$(id -u)" -eq 0 ]; then chown postgres:postgres "$BOUNCER_DIR"; fi
ini="$BOUNCER_DIR/pgbouncer.ini"
pidfile="$BOUNCER_DIR/pgbouncer.pid"
# A schema's search_path (runtime.Config.Schema) is a startup parameter:
# PgBouncer 1.20 and later restore it for each client's transactions once
# tracked (internal/pgbouncer does the same). Ignoring it would hand a
# client a server connection with another client's path. Before 1.20 the
# setting does not exist and PgBouncer refuses the parameter, which Fila
# reports as such.
track_extra=""
bouncer_version=$("$PGBOUNCER" --version | head -1 | sed -n 's/^PgBouncer \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
if [ -n "$bouncer_version" ] && [ "$(set -- $bouncer_version; echo $(( $1 > 1 || ($1 == 1 && $2 >= 20) )))" = 1 ]; then
	track_extra=$'\ntrack_extra_parameters = IntervalStyle,search_path'
fi
new_ini=$(cat <<INI
; Shared PgBouncer for Fila's test suite, written by scripts/setup.sh.
[databases]
* = host=${PG_HOST} port=${PG_PORT}

[pgbouncer]
listen_addr = ${PG_HOST}
listen_port = ${BOUNCER_PORT}
unix_socket_dir =
auth_type = trust
auth_file = ${BOUNCER_DIR}/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
server_reset_query =
ignore_startup_parameters = extra_float_digits,options${track_extra}
server_login_retry = 1
; The suite opens thousands of connections: log only what goes wrong.
log_connections = 0
log_disconnections = 0
logfile = ${BOUNCER_DIR}/pgbouncer.log
pidfile = ${pidfile}
INI
)
ini_changed=""
if [ ! -f "$ini" ] || [ "$(cat "$ini")" != "$new_ini" ]; then
	printf '%s\n' "$new_ini" | as_pg tee "$ini" >/dev/null
	ini_changed=1
fi
userlist="$BOUNCER_DIR/userlist.txt"
if [ "$(cat "$userlist" 2>/dev/null)" != '"postgres" ""' ]; then
	printf '"postgres" ""\n' | as_pg tee "$userlist" >/dev/null
	ini_changed=1
fi

# The supervisor runs PgBouncer in the foreground and starts it again when it
# exits. The shared PgBouncer once went away in the middle of a run, and
# every test after it failed. PgBouncer 1.18 (Debian bookworm's) has known
# FATAL exits in its cancel-request handling (fixed upstream in releases
# 1.19 to 1.21), and the suite cancels statements through it. Each exit is
# appended to exits.log with its status and PgBouncer's last log lines, so a
# pass can report it, and the tests after it find PgBouncer again.
supervisor="$BOUNCER_DIR/supervise.sh"
supervisor_pidfile="$BOUNCER_DIR/supervisor.pid"
new_supervisor=$(cat <<SUPERVISE
#!/usr/bin/env bash
# Written by scripts/setup.sh: keeps the shared PgBouncer running.
echo \$\$ > "$supervisor_pidfile"
quick=0
while :; do
	started=\$SECONDS
	"$PGBOUNCER" "$ini" >>"$BOUNCER_DIR/stderr.log" 2>&1
	status=\$?
	{
		printf '%s pgbouncer exited with status %d after %d s; started again\\n' "\$(date -u +%FT%TZ)" "\$status" \$((SECONDS - started))
		tail -n 5 "$BOUNCER_DIR/pgbouncer.log" | sed 's/^/    /'
	} >>"$BOUNCER_DIR/exits.log"
	# One that cannot start (its port taken) is retried every 5 s, not spun.
	if [ \$((SECONDS - started)) -lt 2 ]; then quick=\$((quick + 1)); else quick=0; fi
	if [ "\$quick" -ge 3 ]; then sleep 5; else sleep 0.2; fi
done
SUPERVISE
)
if [ "$(cat "$supervisor" 2>/dev/null)" != "$new_supervisor" ]; then
	printf '%s\n' "$new_supervisor" | as_pg tee "$supervisor" >/dev/null
	chmod 755 "$supervisor"
fi

supervisor_pid=""
if [ -f "$supervisor_pidfile" ] && kill -0 "$(cat "$supervisor_pidfile")" 2>/dev/null &&
	grep -q supervise.sh "/proc/$(cat "$supervisor_pidfile")/cmdline" 2>/dev/null; then
	supervisor_pid=$(cat "$supervisor_pidfile")
fi
running_pid=""
if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
	running_pid=$(cat "$pidfile")
fi
if [ -n "$supervisor_pid" ] && [ -n "$running_pid" ] && [ -n "$ini_changed" ]; then
	as_root kill -HUP "$running_pid"
	wait_for 30 bouncer_ok || die "shared pgbouncer did not answer after reloading $ini"
	step "pgbouncer: config changed; reloaded the shared one (pid $running_pid)"
elif [ -n "$supervisor_pid" ] && bouncer_ok; then
	step "pgbouncer: shared one answers on ${PG_HOST}:${BOUNCER_PORT} (supervisor pid $supervisor_pid)"
else
	# Replace whatever of ours runs: a supervisor whose PgBouncer does not
	# answer, or a PgBouncer started without one (by an earlier setup.sh).
	if [ -n "$supervisor_pid" ]; then
		as_root kill -KILL "$supervisor_pid" || true
	fi
	if [ -n "$running_pid" ]; then
		as_root kill -KILL "$running_pid" || true
		wait_for 10 bash -c "! kill -0 $running_pid 2>/dev/null" || true
	fi
	rm -f "$pidfile" "$supervisor_pidfile"
	if pg_isready -q -h "$PG_HOST" -p "$BOUNCER_PORT" >/dev/null 2>&1 ||
		(exec 3<>"/dev/tcp/${PG_HOST}/${BOUNCER_PORT}") 2>/dev/null; then
		die "something else listens on ${PG_HOST}:${BOUNCER_PORT} and does not serve ${BOUNCER_URL}"
	fi
	# setsid -f: in a session of its own, runuser included, so nothing that
	# signals the group or session of whoever ran setup.sh reaches it.
	if [ "$(id -u)" -eq 0 ]; then
		setsid -f runuser -u postgres -- "$supervisor" </dev/null >/dev/null 2>&1
	else
		setsid -f "$supervisor" </dev/null >/dev/null 2>&1
	fi
	wait_for 30 bouncer_ok || die "shared pgbouncer did not answer; see $BOUNCER_DIR/pgbouncer.log and $BOUNCER_DIR/stderr.log"
	step "pgbouncer: started the shared one on ${PG_HOST}:${BOUNCER_PORT} (pid $(cat "$pidfile"), supervisor pid $(cat "$supervisor_pidfile"), config $ini)"
fi

# --- 5. Go modules ------------------------------------------------------------
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
command -v go >/dev/null || die "go is not installed (expected on PATH or in /usr/local/go/bin)"
go mod download
if [ -f bench/peers/go.mod ]; then
	(cd bench/peers && go mod download)
	step "go: modules downloaded (main module, bench/peers)"
else
	step "go: modules downloaded (main module)"
fi

# --- 5b. Node.js packages of the peers benchmark ------------------------------
NODE_DIR=bench/peers/node
node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
# node_modules_current: npm writes node_modules/.package-lock.json on every
# install, so one at least as new as package-lock.json was installed from it.
node_modules_current() {
	[ -f "$NODE_DIR/node_modules/.package-lock.json" ] &&
		[ ! "$NODE_DIR/package-lock.json" -nt "$NODE_DIR/node_modules/.package-lock.json" ]
}
if [ -f "$NODE_DIR/package-lock.json" ]; then
	if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
		apt_install nodejs npm || die "could not install nodejs and npm"
	fi
	[ "$(node_major)" -ge 20 ] || die "bench/peers needs Node.js 20 or later; node is $(node --version)"
	if node_modules_current; then
		step "node: $(node --version), $NODE_DIR packages installed"
	else
		(cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
			die "npm ci in $NODE_DIR failed"
		step "node: $(node --version), $NODE_DIR packages installed with npm ci"
	fi
fi

# --- 6. chromium for the dashboard's browser test ------------------------------
if [ -x /usr/bin/chromium ]; then
	step "chromium: installed ($(/usr/bin/chromium --version 2>/dev/null | head -1))"
else
	apt_install chromium || die "could not install chromium"
	[ -x /usr/bin/chromium ] || die "chromium installed but /usr/bin/chromium is missing"
	step "chromium: installed ($(/usr/bin/chromium --version 2>/dev/null | head -1))"
fi

# --- 7. patroni and etcd for the high-availability scenarios ------------------
# Debian's python3 is the one Patroni's modules are installed for: check them
# with it, not with whatever python3 comes first on PATH.
# pkill and pgrep (procps) are the clusters' cleanup (internal/patroni).
ha_ok() {
	[ -x /usr/bin/patroni ] && [ -x /usr/bin/etcd ] && command -v pkill >/dev/null && command -v pgrep >/dev/null &&
		/usr/bin/python3 -c 'import patroni, etcd, psycopg2' >/dev/null 2>&1
}
ha_versions() {
	printf 'patroni %s, etcd %s' \
		"$(/usr/bin/patroni --version 2>/dev/null | awk '{print $NF}')" \
		"$(/usr/bin/etcd --version 2>/dev/null | awk '/^etcd Version/ {print $NF}')"
}
# stop_system_ha stops a system etcd or Patroni that started despite the
# policy (or was there before) and keeps it off: the tests start their own on
# free ports, but a system etcd on 2379 or Patroni on 8008 would confuse
# anyone reading the ports, and keeps running for nothing.
stop_system_ha() {
	local svc stopped=()
	for svc in etcd patroni; do
		if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then
			if systemctl is-active --quiet "$svc" 2>/dev/null || systemctl is-enabled --quiet "$svc" 2>/dev/null; then
				as_root systemctl disable --now "$svc" >/dev/null 2>&1 || true
				stopped+=("$svc")
			fi
		elif [ -x "/etc/init.d/$svc" ] && as_root "/etc/init.d/$svc" status >/dev/null 2>&1; then
			as_root "/etc/init.d/$svc" stop >/dev/null 2>&1 || true
			stopped+=("$svc")
		fi
	done
	if [ "${#stopped[@]}" -gt 0 ]; then echo " (stopped the system ${stopped[*]})"; fi
}
if ha_ok; then
	step "patroni: installed ($(ha_versions))$(stop_system_ha)"
else
	apt_install patroni etcd-server python3-etcd python3-psycopg2 procps || die "could not install patroni and etcd-server"
	ha_ok || die "patroni and etcd-server installed, but /usr/bin/patroni, /usr/bin/etcd or Patroni's python modules are missing"
	step "patroni: installed ($(ha_versions)), system services not running$(stop_system_ha)"
fi
