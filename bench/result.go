package bench

// Names of the systems and modes the goals look up. Fila's suite and the
// peers module both write them, so one reader finds the same rows in either
// file and in the two merged.
const (
	SystemFila  = "fila"
	SystemFloor = "floor"
	SystemRiver = "river"
	// SystemGraphileWorker and SystemPgBoss are the Node.js peers.
	SystemGraphileWorker = "graphile-worker"
	SystemPgBoss         = "pg-boss"

	ModeNotify = "notify"
	ModeWAL    = "wal"

	// FloorListen is a bare LISTEN connection: the notification arrives.
	FloorListen = "listen"
	// FloorListenClaim is a bare LISTEN connection plus the minimal one-row
	// claim, prepared, on a direct connection: the claim returns the job.
	FloorListenClaim = "listen+claim"

	ThroughputDrain = "drain"
	// ThroughputDrainTyped is the drain with a typed handler (runtime.Work),
	// run right after the untyped one on the same backlog size.
	ThroughputDrainTyped = "drain-typed"
	ThroughputSteady     = "steady"
	ThroughputSQLFloor   = "sql-floor"

	// TunedPrefix starts the mode of every peer configuration tuned for
	// its best figure ("tuned-10ms", "tuned-500w-1ms").
	TunedPrefix = "tuned"
)

// LatencyResult is one pickup-latency scenario: one system in one mode at one
// steady insert rate. Latency is measured on one clock, from just before the
// producer's COMMIT to the first line of the handler.
type LatencyResult struct {
	System     string `json:"system"`       // "fila", "floor", "river", "gue", "graphile-worker", "pg-boss"
	Mode       string `json:"mode"`         // "notify", "poll-50ms", "listen-only", "default", "tuned-10ms", ...
	RatePerSec int    `json:"rate_per_sec"` // target insert rate
	Count      int    `json:"count"`        // jobs inserted
	// AchievedPerSec is the rate the producers really committed at: jobs
	// committed over the time from the first job's due time to the last
	// commit, plus one interval. Below RatePerSec, the producers fell behind
	// and the system was offered less than asked.
	AchievedPerSec float64   `json:"achieved_per_sec,omitempty"`
	Lost           int       `json:"lost"` // inserted but never picked up before the deadline
	P50Ms          float64   `json:"p50_ms"`
	P90Ms          float64   `json:"p90_ms"`
	P99Ms          float64   `json:"p99_ms"`
	P999Ms         float64   `json:"p999_ms"`
	MaxMs          float64   `json:"max_ms"`
	SamplesMs      []float64 `json:"samples_ms,omitempty"` // every latency, for charts
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
	// GoCPUMs is the CPU time (user and system) the Go process spent while
	// the scenario ran, and GoGCCPUMs the part of it the garbage collector
	// used, for Fila's own rows; zero when not measured.
	GoCPUMs   float64 `json:"go_cpu_ms,omitempty"`
	GoGCCPUMs float64 `json:"go_gc_cpu_ms,omitempty"`
}

// IdleResult is what one worker costs the database while there is no work:
// transactions it ran and backend CPU it used over a window.
type IdleResult struct {
	System string `json:"system"` // "fila"
	Mode   string `json:"mode"`   // "notify", "poll-50ms", ...
	// Queues is how many queues the worker serves (0 or 1: one).
	Queues int `json:"queues,omitempty"`
	// Seconds is the measured window.
	Seconds float64 `json:"seconds"`
	// Transactions committed or rolled back in the worker's database during
	// the window (pg_stat_database, read from another database), less
	// QueueReads.
	Transactions int64   `json:"transactions"`
	TxPerSec     float64 `json:"tx_per_sec"`
	// QueueReads are transactions the worker's listener ran reading other
	// databases' notifications from the server's shared queue, as a bare
	// LISTEN over the same window did; not in Transactions.
	QueueReads int64 `json:"queue_reads,omitempty"`
	// Backends is how many server processes served the worker.
	Backends int `json:"backends"`
	// CPUMs is the user+system CPU those backends used during the window, in
	// milliseconds; negative when it could not be read (PostgreSQL on
	// another machine).
	CPUMs float64 `json:"cpu_ms"`
	// SafetyPollSec and PingSec are the worker's safety-poll and listener
	// keep-alive intervals (0 when the mode has none), and LivenessSec the
	// interval at which it refreshes its row in fila_workers, so the
	// expected queries of an idle window can be worked out.
	SafetyPollSec float64 `json:"safety_poll_sec,omitempty"`
	PingSec       float64 `json:"ping_sec,omitempty"`
	LivenessSec   float64 `json:"liveness_sec,omitempty"`
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

// SoakResult is a long run at a steady insert rate with short retention,
// reported window by window, so growth of the table or of the tail latency
// over time shows.
type SoakResult struct {
	System       string       `json:"system"`
	Mode         string       `json:"mode"`
	RatePerSec   int          `json:"rate_per_sec"`  // asked insert rate
	Seconds      float64      `json:"seconds"`       // producers' run
	WindowSec    float64      `json:"window_sec"`    // length of one row
	RetentionSec float64      `json:"retention_sec"` // the runtime's Retention
	Inserted     int          `json:"inserted"`      // jobs committed
	Lost         int          `json:"lost"`          // committed, not started within 5 s of the end
	Config       string       `json:"config"`        // the runtime's sizing
	Windows      []SoakWindow `json:"windows"`
}

// SoakWindow is one window of a soak: what was inserted, picked up and
// completed in it, and the table as the database reported it at its end.
type SoakWindow struct {
	EndSec          float64 `json:"end_sec"`
	InsertedPerSec  float64 `json:"inserted_per_sec"`
	CompletedPerSec float64 `json:"completed_per_sec"`
	// DeletedPerSec is the rows deleted from fila_jobs in the window (the
	// retention's work), from pg_stat_user_tables.
	DeletedPerSec float64 `json:"deleted_per_sec"`
	PickedUp      int     `json:"picked_up"`
	P50Ms         float64 `json:"p50_ms"`
	P99Ms         float64 `json:"p99_ms"`
	// TableBytes is pg_total_relation_size('fila_jobs') (heap, indexes,
	// TOAST); IndexBytes is pg_indexes_size('fila_jobs').
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// LiveRows and DeadRows are the statistics' estimates.
	LiveRows int64 `json:"live_rows"`
	DeadRows int64 `json:"dead_rows"`
}

// BigTableResult is pickup latency on an empty jobs table and again on the
// same table after it was seeded with a long completed history and a large
// backlog scheduled in the future, none of which the claim should read.
type BigTableResult struct {
	Empty LatencyResult `json:"empty"`
	Big   LatencyResult `json:"big"`
	// Completed and Scheduled are the seeded rows, counted in the table
	// after seeding.
	Completed   int64   `json:"completed"`
	Scheduled   int64   `json:"scheduled"`
	SeedSeconds float64 `json:"seed_seconds"` // seeding, VACUUM ANALYZE and CHECKPOINT
	TableBytes  int64   `json:"table_bytes"`  // pg_total_relation_size after seeding
	// Checkpointed says a CHECKPOINT wrote the seed out before the second
	// run (it needs a superuser or pg_checkpoint).
	Checkpointed bool `json:"checkpointed"`
}

// BulkResult is one large batch enqueued with Fila's InsertMany next to a
// COPY of the same rows into the same table: the floor of a bulk insert.
type BulkResult struct {
	Jobs             int     `json:"jobs"`
	Rounds           int     `json:"rounds"` // the best round of each is kept
	InsertManySec    float64 `json:"insert_many_sec"`
	InsertManyPerSec float64 `json:"insert_many_per_sec"`
	CopySec          float64 `json:"copy_sec"`
	CopyPerSec       float64 `json:"copy_per_sec"`
}

// ExecResult is `fila work --exec KIND=true` draining a backlog next to
// `xargs -P` running as many `sh -c true`, at the same concurrency: the
// floor of a command per job (best round of each).
type ExecResult struct {
	Jobs        int     `json:"jobs"`
	Concurrency int     `json:"concurrency"`
	Rounds      int     `json:"rounds"`
	FilaSec     float64 `json:"fila_sec"`
	FilaPerSec  float64 `json:"fila_per_sec"`
	XargsSec    float64 `json:"xargs_sec"`
	XargsPerSec float64 `json:"xargs_per_sec"`
	// FilaOverheadCPUUs is the CPU the worker process and its exec guards
	// used per attempt, beyond the commands; FilaCommandCPUUs the
	// commands' (sh -c true); XargsCPUUs xargs's and its commands' per
	// command, all in microseconds.
	FilaOverheadCPUUs float64 `json:"fila_overhead_cpu_us"`
	FilaCommandCPUUs  float64 `json:"fila_command_cpu_us"`
	XargsCPUUs        float64 `json:"xargs_cpu_us"`
}

// BreakdownResult cuts one system's pickups at a low rate into steps (see
// the breakdown scenario): the median and mean of each step over the jobs
// that could be traced. Medians of steps do not add up to the median of
// the whole; means do, to the traced mean.
type BreakdownResult struct {
	System     string `json:"system"` // "fila", "floor"
	Mode       string `json:"mode"`
	RatePerSec int    `json:"rate_per_sec"`
	Jobs       int    `json:"jobs"`   // jobs committed
	Traced     int    `json:"traced"` // jobs whose every step was seen
	// LatencyP50Ms is the run's pickup p50 over every job; TracedP50Ms and
	// TracedMeanMs over the traced ones.
	LatencyP50Ms float64         `json:"latency_p50_ms"`
	TracedP50Ms  float64         `json:"traced_p50_ms"`
	TracedMeanMs float64         `json:"traced_mean_ms"`
	Steps        []BreakdownStep `json:"steps"`
	// BareRoundTripMs is the median SELECT 1 round trip on the claims'
	// pool after the run: the part of a claim's round trip that is not the
	// server's work. Zero when not measured.
	BareRoundTripMs float64 `json:"bare_round_trip_ms,omitempty"`
}

// BreakdownStep is one step of a pickup.
type BreakdownStep struct {
	Name   string  `json:"name"`
	P50Ms  float64 `json:"p50_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// InsertCostResult is the insert scenario on one server: the median of a
// fresh session's first INSERT (cold) and second (warm) of one job, into
// fila_jobs and into a plain table with the same columns (no index,
// constraint or trigger), and through runtime.Insert into fila_jobs, in
// milliseconds as the producer measures them.
type InsertCostResult struct {
	Server   string `json:"server"`
	Sessions int    `json:"sessions"` // sessions of each way
	// PLpgSQLPreloaded says whether the server's shared_preload_libraries
	// names plpgsql: else each session loads it at its first trigger.
	PLpgSQLPreloaded bool    `json:"plpgsql_preloaded"`
	PlainColdP50Ms   float64 `json:"plain_cold_p50_ms"`
	PlainWarmP50Ms   float64 `json:"plain_warm_p50_ms"`
	FilaColdP50Ms    float64 `json:"fila_cold_p50_ms"`
	FilaWarmP50Ms    float64 `json:"fila_warm_p50_ms"`
	InsertColdP50Ms  float64 `json:"insert_cold_p50_ms"`
	InsertWarmP50Ms  float64 `json:"insert_warm_p50_ms"`
}
