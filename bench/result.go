package bench

// LatencyResult is one pickup-latency scenario: one system in one mode at one
// steady insert rate. Latency is measured on one clock, from just before the
// producer's COMMIT to the first line of the handler.
type LatencyResult struct {
	System     string    `json:"system"`       // "fila", "floor", "river", "gue"
	Mode       string    `json:"mode"`         // "notify", "poll-50ms", "listen-only", "default", "tuned-10ms", ...
	RatePerSec int       `json:"rate_per_sec"` // target insert rate
	Count      int       `json:"count"`        // jobs inserted
	Lost       int       `json:"lost"`         // inserted but never picked up before the deadline
	P50Ms      float64   `json:"p50_ms"`
	P90Ms      float64   `json:"p90_ms"`
	P99Ms      float64   `json:"p99_ms"`
	P999Ms     float64   `json:"p999_ms"`
	MaxMs      float64   `json:"max_ms"`
	SamplesMs  []float64 `json:"samples_ms,omitempty"` // every latency, for charts
}

// ThroughputResult is one drain or steady-state throughput scenario.
type ThroughputResult struct {
	System     string  `json:"system"`
	Mode       string  `json:"mode"`    // "drain", "steady", "sql-floor", ...
	Jobs       int     `json:"jobs"`    // jobs completed
	Workers    int     `json:"workers"` // concurrency
	Seconds    float64 `json:"seconds"` // wall time
	JobsPerSec float64 `json:"jobs_per_sec"`
	Config     string  `json:"config,omitempty"` // the settings that gave this figure
}

// IdleResult is what one worker costs the database while there is no work:
// transactions it ran and backend CPU it used over a window.
type IdleResult struct {
	System string `json:"system"` // "fila"
	Mode   string `json:"mode"`   // "notify", "poll-50ms", ...
	// Seconds is the measured window.
	Seconds float64 `json:"seconds"`
	// Transactions committed or rolled back in the worker's database during
	// the window (pg_stat_database, read from another database).
	Transactions int64   `json:"transactions"`
	TxPerSec     float64 `json:"tx_per_sec"`
	// Backends is how many server processes served the worker.
	Backends int `json:"backends"`
	// CPUMs is the user+system CPU those backends used during the window, in
	// milliseconds; negative when it could not be read (PostgreSQL on
	// another machine).
	CPUMs float64 `json:"cpu_ms"`
	// SafetyPollSec and PingSec are the worker's safety-poll and listener
	// keep-alive intervals (0 when the mode has none), so the expected
	// queries of an idle window can be worked out.
	SafetyPollSec float64 `json:"safety_poll_sec,omitempty"`
	PingSec       float64 `json:"ping_sec,omitempty"`
}

// ProducerResult is the commit rate and latency of P concurrent producers,
// each committing one single-row INSERT per transaction, with one way of
// waking workers: "notify" (the insert trigger's NOTIFY), "no-trigger"
// (trigger disabled, nothing wakes workers), or "wal" (trigger disabled,
// a logical-replication worker running).
type ProducerResult struct {
	System        string  `json:"system"`
	Mode          string  `json:"mode"`
	Producers     int     `json:"producers"`
	Commits       int     `json:"commits"`
	Errors        int     `json:"errors"`
	Seconds       float64 `json:"seconds"`
	CommitsPerSec float64 `json:"commits_per_sec"`
	// Commit latency: the COMMIT round trip alone.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	MaxMs float64 `json:"max_ms"`
}
