// Package suite runs Fila's benchmark scenarios against a real PostgreSQL,
// each in a fresh database created for it and dropped afterwards (also on
// error and on Ctrl-C), and formats what they measured. `fila bench` is its
// command line.
//
// Scenarios:
//
//   - latency: pickup latency at steady insert rates, one job per
//     transaction, open loop, for each runtime mode (notify, poll-50ms,
//     poll-200ms, poll-1s, wal — the last with the insert trigger's NOTIFY
//     off, as docs/wake-sources.md says to run it), from just before COMMIT to the
//     handler's first line, on one monotonic clock, with the commit rate
//     the producers really reached;
//   - floor: the same producer against a bare LISTEN connection (the
//     notification arrives) and a bare LISTEN plus the minimal one-row
//     claim, prepared, on a direct connection, repeated until the queue is
//     empty: the simplest correct NOTIFY-woken worker, so Fila's overhead is
//     its latency over it;
//   - drain, steady, sqlfloor: no-op jobs per second from a backlog, with
//     producers running at once, and from a minimal prepared batch claim
//     and one fenced UPDATE alone;
//   - idle: transactions and backend CPU an idle worker costs its database;
//   - producers: commits per second of concurrent single-row producers with
//     the NOTIFY trigger on and off (the instance-wide commit lock);
//   - bigtable: pickup latency on an empty table and on the same table
//     seeded with a large completed history and a large backlog scheduled
//     in the future;
//   - bulk: runtime.InsertMany of a large batch next to a COPY of the same
//     rows;
//   - exec: a real `fila work --concurrency 32 --exec KIND=true` process
//     draining a backlog next to `xargs -P 32 sh -c true` (the floor of a
//     command per job), with the worker's and its exec guards' CPU per
//     attempt beyond the command, read from /proc;
//   - flows (not run by default): the same number of jobs drained plain,
//     as one workflow of layers of 100 (each job after two of the layer
//     before), and as sequences of three, each beside the plain drain;
//   - soak (not run by default): minutes of steady inserts with short
//     retention, window by window: pickup p50/p99, throughput, deletions
//     and the table's size.
//
// The goals (report.Goals) are judged on the figures of one run only. With
// Options.PeersDir the bench/peers module runs River, graphile-worker and
// pg-boss on the same server, each latency rate right after Fila's rows of
// that rate and the drains right after Fila's, and its rows join the
// results; without it, every comparison with a peer is "not measured".
//
// It is a package of its own rather than part of package bench because
// bench/report, which it uses for tables, percentiles and charts, imports
// bench's result types.
package suite
