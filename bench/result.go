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
}
