// Package suite runs Fila's benchmark scenarios against a real PostgreSQL,
// each in a fresh database created for it and dropped afterwards (also on
// error and on Ctrl-C), and formats what they measured. `fila bench` is its
// command line.
//
// Scenarios:
//
//   - latency: pickup latency at steady insert rates, one job per
//     transaction, open loop, for each runtime mode (notify, poll-50ms,
//     poll-200ms, poll-1s, wal), from just before COMMIT to the handler's
//     first line, on one monotonic clock;
//   - floor: the same producer against a bare LISTEN connection (the
//     notification arrives) and a bare LISTEN plus one claim statement (the
//     claimer's SQL returns the job): what any NOTIFY-woken worker is
//     bounded by, so Fila's overhead is its latency over it;
//   - drain, steady, sqlfloor: no-op jobs per second from a backlog, with
//     producers running at once, and from the claim and complete SQL alone;
//   - idle: transactions and backend CPU an idle worker costs its database;
//   - producers: commits per second of concurrent single-row producers with
//     the NOTIFY trigger on and off (the instance-wide commit lock).
//
// It is a package of its own rather than part of package bench because
// bench/report, which it uses for tables, percentiles and charts, imports
// bench's result types.
package suite
