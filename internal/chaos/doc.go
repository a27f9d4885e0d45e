// Package chaos injects real faults into running Fila workers and checks
// what the jobs table says afterwards: no job lost, none completed twice,
// no job run by two workers at once, and how long the workers took to come
// back.
//
// Every fault is real: worker processes (`fila work`) are killed with
// SIGKILL or stopped with SIGSTOP, backends are terminated with
// pg_terminate_backend, PostgreSQL and PgBouncer are restarted, and a TCP
// proxy turns the listener's connection half-open. Nothing is mocked.
//
// A scenario runs against an Env: a PostgreSQL to create throwaway
// databases on (and, for the restart faults, the pgcluster and pgbouncer
// the Env owns). The tests of this package run every scenario at a small
// size; `fila chaos` runs them at a size of the user's choosing and prints
// the table kept in docs/reliability.md.
package chaos
