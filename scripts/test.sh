#!/usr/bin/env bash
# test.sh is the test command: what the README tells you to run and what CI
# runs (.ci/run). It needs a Debian-like machine where scripts/setup.sh can
# work (root, or sudo), and takes about ten and a half minutes on two quiet
# cores, longer as busy as the machine is.
#
# Passes, each under its own header:
#   1. scripts/setup.sh: PostgreSQL with wal_level=logical on 127.0.0.1:5432,
#      the shared PgBouncer on 127.0.0.1:6432, Go modules.
#   2. gofmt -l and go vet ./...
#   3. TestHA: the switchover and failover of a Patroni cluster of its
#      own. Patroni's timing is real time, so nothing else that needs
#      timing runs beside it (on two saturated cores its REST API stopped
#      answering for minutes); passes 2 and 7, which need none, start
#      beside it at a lower priority (nice); the lint prints once TestHA is
#      over, the peers' pass at the end.
#   4. go test -race ./... straight to PostgreSQL, but for cmd/fila: its
#      tests run the fila binary in processes of their own, where the race
#      detector does not reach, so they run once, in the next pass; and but
#      for internal/chaos, which runs alone (6).
#   5. beside 4: go test again with FILA_TEST_PGBOUNCER_URL set, so every test's
#      main DSN goes through PgBouncer in transaction mode (listeners still use
#      the direct DSN), over the packages whose statements go through that
#      DSN (see not_through_pooler below). Without -race: this pass is about
#      the pooler, and the race detector has already run over the same code.
#   6. internal/chaos, alone, with -race straight to PostgreSQL, then
#      through PgBouncer without it: its fault scenarios run
#      `fila work` processes on leases of two or three seconds, and beside
#      cmd/fila's tests (which start processes and clusters of their own)
#      the machine's load reached 30 on two cores: commands started seconds
#      after their claims and leases lapsed until jobs ran out of attempts.
#   7. bench/peers (a module of its own) when bench/peers/go.mod exists: go vet,
#      go test (River, gue, graphile-worker and pg-boss at a tiny size), and
#      the Node.js module's own tests (npm test in bench/peers/node).
#
# A failed pass does not hide the others: all run, and the script ends with a
# summary and a non-zero status if any failed. A failed setup stops at once.
#
# A test whose prerequisite is missing fails here rather than skipping
# (FILA_TEST_REQUIRE=all).
#
# Environment: TEST_DATABASE_URL (direct admin DSN, default
# postgres://postgres@127.0.0.1:5432/postgres) and FILA_TEST_PGBOUNCER_URL
# (PgBouncer DSN for passes 5 and 6, default postgres://postgres@127.0.0.1:6432/postgres).
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

BOUNCER_URL="${FILA_TEST_PGBOUNCER_URL:-postgres://postgres@127.0.0.1:6432/postgres}"
failed=()

header() { printf '\n==== %s ====\n' "$*"; }

# The shared PgBouncer's supervisor (see scripts/setup.sh) appends each of
# its exits to this file.
bouncer_exits="${TMPDIR:-/tmp}/fila-pgbouncer/exits.log"
bouncer_crashed=()

# bouncer_exits_size is the size of the exits file now (0 when missing).
bouncer_exits_size() { stat -c %s "$bouncer_exits" 2>/dev/null || echo 0; }

# pass runs one named pass, records a failure and carries on. It shows any
# exit of the shared PgBouncer during the pass, with PgBouncer's last log
# lines, so that failures it caused are not mistaken for Fila's.
pass() {
	local name=$1; shift
	header "$name"
	local start=$SECONDS exits_before
	exits_before=$(bouncer_exits_size)
	if "$@"; then
		printf -- '---- %s: ok (%ds)\n' "$name" $((SECONDS - start))
	else
		printf -- '---- %s: FAILED (%ds)\n' "$name" $((SECONDS - start))
		failed+=("$name")
	fi
	if [ "$(bouncer_exits_size)" -gt "$exits_before" ]; then
		printf -- '---- %s: the shared PgBouncer exited during this pass (its supervisor started it again):\n' "$name"
		tail -c +$((exits_before + 1)) "$bouncer_exits"
		bouncer_crashed+=("$name")
	fi
}

# bg_pass runs a pass in the background beside the ones that follow, at
# nice 10 so that they keep the CPU they need, its output kept until
# collect_bg prints it whole; collect_bg waits for the passes it names (every
# one left, without names), and counts a failure as pass does.
bg_dir=$(mktemp -d)
trap 'rm -rf "$bg_dir"' EXIT
bg_names=()
bg_pids=()
bg_next=0 # never reused: collect_bg unsets the entries it collected
bg_pass() {
	local i=$bg_next
	bg_next=$((bg_next + 1))
	bg_names[$i]=$1
	(
		failed=()
		renice -n 10 -p $BASHPID >/dev/null
		pass "$@"
		[ "${#failed[@]}" -eq 0 ]
	) >"$bg_dir/$i.log" 2>&1 &
	bg_pids[$i]=$!
}
collect_bg() {
	local i name
	for i in "${!bg_names[@]}"; do
		name=${bg_names[$i]}
		if [ "$#" -gt 0 ] && ! printf '%s\n' "$@" | grep -qxF -- "$name"; then
			continue
		fi
		if ! wait "${bg_pids[$i]}"; then
			failed+=("$name")
		fi
		cat "$bg_dir/$i.log"
		unset "bg_names[$i]" "bg_pids[$i]"
	done
}

lint() {
	local unformatted
	unformatted=$(gofmt -l .)
	if [ -n "$unformatted" ]; then
		printf 'gofmt: not formatted:\n%s\n' "$unformatted"
		return 1
	fi
	go vet ./...
}

# Packages pass 5 leaves out: internal/chaos runs alone next (pass 6);
# listener's sources always use the direct DSN, and its refusals of a
# pooler run in pass 4, as do runtime's and migrations'; the dashboard
# (internal/ui) reads through internal/stats, which pass 5 runs, and its
# browser tests cost half a minute; internal/patroni and internal/pgcluster
# start clusters of their own, and internal/execguard runs no statement.
not_through_pooler='/(internal/chaos|listener|internal/ui|internal/patroni|internal/pgcluster|internal/execguard)$'

header "setup"
scripts/setup.sh

# Every prerequisite is in place now: a test that finds one missing fails
# instead of skipping (see internal/testdb.Missing).
export FILA_TEST_REQUIRE=all

# TestHA spends most of its minute and a half waiting on Patroni's
# switchover and failover: the lint and the peers' tests, which need no
# timing of their own, run beside it, niced (see bg_pass). The peers' pass
# is collected last: on a busy machine it runs on what the passes after
# TestHA leave idle, rather than holding them up.
bg_pass "gofmt and go vet" lint
if [ -f bench/peers/go.mod ]; then
	bg_pass "bench/peers: go vet, go test and npm test" \
		bash -c 'cd bench/peers && go vet ./... && go test -count=1 ./... && cd node && npm test'
fi
pass "TestHA: a Patroni cluster's switchover and failover, beside the lint and bench/peers" \
	env -u FILA_TEST_PGBOUNCER_URL go test -race -count=1 -timeout 5m -run '^TestHA$' ./internal/chaos
collect_bg "gofmt and go vet"
# longest_first prints the packages it reads, the longest-running first. go
# test runs two packages at a time and starts them in the order given: in
# the order of their names, runtime (the longest) started at 193 s of a
# 289 s pass, and the pass waited for it alone at the end.
longest_first() {
	local all slow p
	all=$(cat)
	slow="runtime internal/chaos cmd/fila bench/suite internal/patroni listener internal/ui claimer"
	for p in $slow; do
		grep -x "github.com/fila-run/fila/$p" <<<"$all" || true
	done
	for p in $slow; do
		all=$(grep -vx "github.com/fila-run/fila/$p" <<<"$all" || true)
	done
	printf '%s\n' "$all"
}

# The packages whose statements go through the main DSN (see pass 5 above).
# Their pass runs beside the race detector's: most of either is spent
# waiting on PostgreSQL, leases and processes rather than on the CPU, and one
# after the other they took 540 of the suite's 680 s. internal/chaos, whose
# fault scenarios must not share the machine with cmd/fila's processes
# (see pass 6 above), is in neither: it runs alone after them, once per DSN.
bouncer_pkgs=$(go list ./... | grep -v -E "$not_through_pooler" | longest_first)
bg_pass "go test (main DSNs through PgBouncer), beside the race detector's pass" \
	env FILA_TEST_PGBOUNCER_URL="$BOUNCER_URL" go test -count=1 -timeout 25m $bouncer_pkgs
# Every package but cmd/fila (see pass 4 above) and internal/chaos.
race_pkgs=$(go list ./... | grep -v -E '/(cmd/fila|internal/chaos)$' | longest_first)
pass "go test -race (direct to PostgreSQL)" \
	env -u FILA_TEST_PGBOUNCER_URL go test -race -count=1 -timeout 25m $race_pkgs
collect_bg "go test (main DSNs through PgBouncer), beside the race detector's pass"
pass "internal/chaos with -race, direct to PostgreSQL, alone" \
	env -u FILA_TEST_PGBOUNCER_URL go test -race -count=1 -timeout 10m -skip '^TestHA$' ./internal/chaos
pass "internal/chaos through PgBouncer, alone" \
	env FILA_TEST_PGBOUNCER_URL="$BOUNCER_URL" go test -count=1 -timeout 10m ./internal/chaos
collect_bg

header "summary"
if [ "${#bouncer_crashed[@]}" -gt 0 ]; then
	printf 'the shared PgBouncer exited during: %s\n' "${bouncer_crashed[@]}"
fi
if [ "${#failed[@]}" -gt 0 ]; then
	printf 'failed: %s\n' "${failed[@]}"
	exit 1
fi
printf 'all passes ok (%ds)\n' "$SECONDS"
