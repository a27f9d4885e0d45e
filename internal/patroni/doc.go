// Package patroni starts throwaway high-availability PostgreSQL clusters for
// fault tests: one etcd and two Patroni nodes, each managing a PostgreSQL of
// its own built from the installed server binaries, replicating with
// Patroni's synchronous_mode.
//
// Most production PostgreSQL runs as such a cluster, and what Fila promises
// across a switchover or a failover (no acknowledged job lost, never two runs
// of one job at once, workers that carry on without a restart) can only be
// shown on a real one: a primary that turns read-only under its clients, a
// standby promoted while connections to the old primary still answer, a
// multi-host DSN that must find the new primary by itself.
//
// Everything listens on loopback ports picked free at start, and lives in a
// temporary directory (fila-patroni-*): etcd's data, each node's Patroni
// configuration, data directory, socket and log. Clients connect as postgres
// without a password. The settings favour speed where the faults allow it:
// fsync is off (the faults kill processes, never the machine), Patroni loops
// every second, and a primary whose postmaster dies is failed over at once
// (primary_start_timeout 0) rather than restarted in place.
//
// etcd and the Patroni daemons are children of this process, run through
// internal/pgcluster/proc (as the postgres user when we are root, killed
// with this process). Patroni starts each postmaster detached, as pg_ctl
// does, so no signal set on a child reaches it: a guard process (guard.go)
// holds the read end of a pipe whose write end only this process has, and
// when it reads end-of-file — at Close, or when this process dies however
// it dies — it stops everything that still runs from the cluster's directory
// and removes the directory.
package patroni
