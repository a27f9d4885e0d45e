// Package report turns benchmark results into what a person reads: aligned
// text tables, percentile summaries, latency CDF charts as self-contained SVG,
// a progress line for long runs, and a description of the machine and
// PostgreSQL settings the numbers were measured on.
//
// Numbers without their setting mislead: a p99 measured with
// synchronous_commit=off on a laptop says little about a server with fsync
// on. So every run's header carries DescribeMachine's one-liner, and tables
// and charts use the same millisecond formatting (FormatMs) so a value reads
// the same wherever it appears.
//
// The package uses the standard library only, plus pgx to ask PostgreSQL for
// its version and settings. Charts are plain SVG with no scripts or external
// fonts, so they render in a browser and inside a GitHub README alike.
package report
