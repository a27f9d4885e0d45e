package main

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/ui"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// A setting is one thing `fila work` can be told: by a flag, by a key of
// the configuration file, or both. The flags, the file's keys, how each
// value is read and checked, `fila help work` and the table of docs/configuration.md all
// come from settings; a test holds it to runtime.Config, whose every field
// is a setting or in goOnly.
type setting struct {
	key   string // in the file; "" for a flag only
	flag  string // without its dashes; "" for a key only
	field string // the runtime.Config fields it sets, "" for the process's own
	arg   string // the value's form, for help: DURATION, N, HOST:PORT…
	// allowed and def say in help and docs/configuration.md what the value may be
	// and what it is when left out.
	allowed, def string
	doc          string
	// top and group say where the file takes the key: at its top (the
	// process's), in each group, or both (a group's own wins).
	top, group bool
	// boolean makes the flag one that needs no value (--public-read).
	boolean bool
	// read parses one value as written, flag argument or file value; nil
	// for the settings that are lists, read by their own code.
	read func(r raw) (value, error)
	// check, if set, says what is wrong with a value read, in c, the
	// group's configuration with its defaults ("" if nothing); name gives
	// another setting's name as the user writes it.
	check func(v value, c runtime.Config, name func(key string) string) string
}

// The settings that are lists, read by their own code. Their keys are
// as the file nests them.
const (
	keyQueues    = "queues"
	keyExec      = "exec"
	keyTimeout   = "exec.KIND.timeout"
	keyLimit     = "exec.KIND.limit"
	keyRateLimit = "exec.KIND.rate_limit"
	keyRecurring = "recurring"
)

// globalFlags are the flags of settings every command takes (see globals).
var globalFlags = []string{"dsn", "listen-dsn", "schema"}

var settings = []setting{
	// The process's.
	{key: "dsn", flag: "dsn", field: "DSN", top: true, group: true,
		arg: "DSN", def: "$FILA_DSN, $DATABASE_URL, then PG* and localhost",
		read: readSecret("FILA_DSN", dsnDefault),
		doc:  "the main database connection; may point at PgBouncer in transaction mode (in a file, ${VAR} only)"},
	{key: "listen_dsn", flag: "listen-dsn", field: "ListenDSN", top: true, group: true,
		arg: "DSN", def: "$FILA_LISTEN_DSN, then dsn",
		read: readSecret("FILA_LISTEN_DSN", dsnDefault),
		doc:  "the listener's dedicated connection: PostgreSQL directly, never a transaction-mode pooler, and the same database (in a file, ${VAR} only)"},
	{key: "schema", flag: "schema", field: "Schema", top: true, group: true,
		arg: "SCHEMA", allowed: fmt.Sprintf("letters, digits and _, at most %d bytes", channel.MaxSchemaLen), def: "none: the tables the search_path finds",
		read: readSchema,
		doc:  "the schema of Fila's tables, for applications that share one database, each in a schema of its own (fila migrate --schema): the connections' search_path, and the channels and publication the wake source follows; through PgBouncer, 1.20 or later with track_extra_parameters = search_path"},
	{key: "shutdown_timeout", flag: "shutdown-timeout", top: true,
		arg: "DURATION", allowed: "0 and up", def: short(shutdownTimeoutDefault),
		read: readDuration, check: atLeast(0, "0 cancels running jobs at once"),
		doc: "on SIGTERM, let running jobs finish for this long, then cancel them; 0 cancels them at once (a second signal also does)"},
	{key: "metrics_addr", flag: "metrics-addr", top: true,
		arg: "HOST:PORT", def: "none",
		read: readAddr,
		doc:  "serve Prometheus metrics on this address, at /metrics"},
	{key: "health_addr", flag: "health-addr", top: true,
		arg: "HOST:PORT", def: "none",
		read: readAddr,
		doc:  "serve /livez (the process is alive) and /readyz (the database answers and the wake source is up; 503 with the reason if not) on this address; may equal metrics_addr"},
	{key: "ui_addr", flag: "ui-addr", top: true,
		arg: "HOST:PORT", def: "none",
		read: readAddr,
		doc:  "serve the web dashboard on this address, as fila ui does"},
	{key: "ui_admin_token", flag: "admin-token", top: true,
		arg: "TOKEN", allowed: fmt.Sprintf("at least %d characters", ui.TokenMinLen), def: "$" + ui.AdminTokenEnv,
		read: readSecret(ui.AdminTokenEnv, nil), check: token,
		doc: "the dashboard's token for reading it and for retry, cancel, delete, pause and resume; without one it is read-only (in a file, ${VAR} only)"},
	{key: "ui_read_token", flag: "read-token", top: true,
		arg: "TOKEN", allowed: fmt.Sprintf("at least %d characters, not the admin token", ui.TokenMinLen), def: "$" + ui.ReadTokenEnv,
		read: readSecret(ui.ReadTokenEnv, nil), check: token,
		doc: "the dashboard's token for reading it, payloads included, and nothing else (in a file, ${VAR} only)"},
	{key: "ui_public_read", flag: "public-read", top: true, boolean: true,
		arg: "true|false", def: "false, or true with no token",
		read: readBool,
		doc:  "let anyone who reaches the dashboard read it, payloads included, without a token; false needs a token to log in with"},
	{key: "otel", flag: "otel", top: true, boolean: true,
		arg: "true|false", def: "false",
		read: readBool,
		doc:  "trace each attempt with OpenTelemetry (package runtime/otelfila): a span joined to the trace of the insert that enqueued the job, TRACEPARENT in each --exec command's environment; spans go where the OTEL_* environment says (OTEL_TRACES_EXPORTER otlp over http/protobuf, console or none)"},
	{key: keyRecurring, field: "Recurring", top: true,
		arg: "[task …]", def: "none",
		doc: "recurring tasks, each enqueuing a job at every slot of its schedule; a file only: a task has too many parts for a flag"},

	// A worker group's.
	{key: "name", group: true,
		arg: "NAME", allowed: "1 to 63 letters, digits, _ . -",
		doc: "names the group in logs and errors; required in a file, whose groups each run a runtime of their own"},
	{key: keyQueues, flag: "queue", field: "Queues, QueueConcurrency", group: true,
		arg: "QUEUE[=N]", allowed: "N 1 to " + strconv.Itoa(runtime.ConcurrencyMax), def: "the queue named default",
		doc: "a queue to work, repeatable; QUEUE=N (in a file {name: QUEUE, concurrency: N}) runs up to N of its jobs at once instead of concurrency"},
	{key: keyExec, flag: "exec", field: "Kinds.Name", group: true,
		arg: "KIND=COMMAND", def: "noop and sleep only",
		doc: "run COMMAND with sh -c for each job of KIND, repeatable (in a file KIND: COMMAND); payload on stdin, its stdout goes to this worker's stdout, the tail of its stderr becomes the job's error; exit 0 completes, " + strconv.Itoa(ExitPermanent) + " fails permanently, anything else retries"},
	{key: keyTimeout, flag: "timeout", field: "Kinds.Timeout", group: true,
		arg: "KIND=DURATION", allowed: "above 0", def: "none",
		doc: "cancel an attempt of KIND after this long, one per kind"},
	{key: keyLimit, flag: "limit", field: "Kinds.Limit", group: true,
		arg: "KIND=N[:PATH]", allowed: "N 1 to " + strconv.Itoa(runtime.LimitMaxMax), def: "none",
		doc: "run at most N jobs of KIND at once across every worker, per value of the payload's dotted PATH (such as account.id), or for the whole kind without one (in a file {max: N, key: PATH}); every worker of KIND must give the same"},
	{key: keyRateLimit, flag: "rate-limit", field: "Kinds.RateLimit", group: true,
		arg: "KIND=N/PERIOD[:PATH]", allowed: "N 1 to " + strconv.Itoa(runtime.LimitMaxMax) + ", PERIOD " + span(runtime.RatePeriodMin, runtime.RatePeriodMax), def: "none",
		doc: "start at most N jobs of KIND in any window of PERIOD across every worker, per value of the payload's dotted PATH, or for the whole kind without one (in a file {max: N, period: PERIOD, key: PATH}); the others wait and start as soon as the window allows; holds with limit; every worker of KIND must give the same"},
	{key: "concurrency", flag: "concurrency", field: "Concurrency", group: true,
		arg: "N", allowed: "1 to " + strconv.Itoa(runtime.ConcurrencyMax), def: strconv.Itoa(runtime.ConcurrencyDefault),
		read: readInt, check: wholeIn(1, runtime.ConcurrencyMax),
		doc: "handlers running at once in each queue not given its own"},
	{key: "max_concurrency", flag: "max-concurrency", field: "MaxConcurrency", group: true,
		arg: "N", allowed: "0 to " + strconv.Itoa(runtime.ConcurrencyMax) + " per queue", def: "0 (no cap)",
		read: readInt, check: func(v value, c runtime.Config, _ func(string) string) string {
			hi := runtime.ConcurrencyMax * len(c.Queues)
			return inRange(v, 0, int64(hi), fmt.Sprintf("allowed 0 (no cap) to %d (%d per queue)", hi, runtime.ConcurrencyMax))
		},
		doc: "cap on handlers running at once across all queues, which take free slots in turn"},
	{key: "mode", flag: "mode", field: "Mode", group: true,
		arg: "MODE", allowed: "notify, poll, wal", def: string(runtime.ModeNotify),
		read: readChoice(string(runtime.ModeNotify), string(runtime.ModePoll), string(runtime.ModeWAL)),
		doc:  "how workers learn of new jobs: LISTEN/NOTIFY, polling with an idle backoff (no dedicated connection), or logical replication"},
	{key: "lease", flag: "lease", field: "Lease", group: true,
		arg: "DURATION", allowed: span(runtime.LeaseMin, runtime.LeaseMax), def: short(runtime.LeaseDefault),
		read: readDuration, check: durations(runtime.LeaseMin, runtime.LeaseMax),
		doc: "lease of a claimed job, kept alive by heartbeats; a crashed worker's job runs again after this"},
	{key: "heartbeat_interval", flag: "heartbeat-interval", field: "HeartbeatInterval", group: true,
		arg: "DURATION", allowed: "above 0 to half the lease", def: "lease/3",
		read: readDuration, check: func(v value, c runtime.Config, name func(string) string) string {
			return inRange(v, 1, int64(c.Lease/2), fmt.Sprintf("allowed above 0 to %s (half of %s)", short(c.Lease/2), name("lease")))
		},
		doc: "how often the leases of running jobs are renewed"},
	{key: "safety_poll", flag: "safety-poll", field: "SafetyPoll", group: true,
		arg: "DURATION", allowed: span(runtime.SafetyPollMin, runtime.SafetyPollMax), def: short(runtime.SafetyPollDefault),
		read: readDuration, check: durations(runtime.SafetyPollMin, runtime.SafetyPollMax),
		doc: "claim without a wake-up this often while the wake source is healthy, to catch a lost notification"},
	{key: "unhealthy_poll", flag: "unhealthy-poll", field: "UnhealthyPoll", group: true,
		arg: "DURATION", allowed: short(runtime.UnhealthyPollMin) + " to safety_poll", def: short(runtime.UnhealthyPollDefault),
		read: readDuration, check: func(v value, c runtime.Config, name func(string) string) string {
			return inRange(v, int64(runtime.UnhealthyPollMin), int64(c.SafetyPoll), fmt.Sprintf("allowed %s to %s (%s)", short(runtime.UnhealthyPollMin), short(c.SafetyPoll), name("safety_poll")))
		},
		doc: "the poll interval while the wake source is down"},
	{key: "poll_min", flag: "poll-min", field: "PollMin", group: true,
		arg: "DURATION", allowed: span(runtime.PollMinMin, runtime.PollMinMax), def: short(runtime.PollMinDefault),
		read: readDuration, check: durations(runtime.PollMinMin, runtime.PollMinMax),
		doc: "poll mode: the interval while work flows"},
	{key: "poll_max", flag: "poll-max", field: "PollMax", group: true,
		arg: "DURATION", allowed: "poll_min to " + short(runtime.SafetyPollMax), def: short(runtime.PollMaxDefault) + ", or poll_min if greater",
		read: readDuration, check: func(v value, c runtime.Config, name func(string) string) string {
			return inRange(v, int64(c.PollMin), int64(runtime.SafetyPollMax), fmt.Sprintf("allowed %s to %s (from %s)", short(c.PollMin), short(runtime.SafetyPollMax), name("poll_min")))
		},
		doc: "poll mode: the idle backoff's cap"},
	{key: "busy_rate", flag: "busy-rate", field: "BusyRate", group: true,
		arg: "N|off", allowed: "1 and up, or off", def: strconv.Itoa(runtime.BusyRateDefault),
		read: readOr("off", readInt), check: orWord("off", wholeIn(1, math.MaxInt32, "allowed 1 and up (jobs a second), or off to always wait for notifications")),
		doc: "notify mode: jobs a second a queue's notifications must bring before the worker polls it instead and producers stop notifying it; off always waits for notifications"},
	{key: "claim_batch", flag: "claim-batch", field: "ClaimBatch", group: true,
		arg: "N", allowed: "1 to " + strconv.Itoa(runtime.ClaimBatchMax), def: strconv.Itoa(runtime.ClaimBatchDefault),
		read: readInt, check: wholeIn(1, runtime.ClaimBatchMax),
		doc: "the most jobs one claim statement takes"},
	{key: "retry_base", flag: "retry-base", field: "RetryBase", group: true,
		arg: "DURATION", allowed: "above 0 to retry_max", def: short(runtime.RetryBaseDefault),
		read: readDuration, check: func(v value, c runtime.Config, name func(string) string) string {
			return inRange(v, 1, int64(c.RetryMax), fmt.Sprintf("allowed above 0 to %s (%s)", short(c.RetryMax), name("retry_max")))
		},
		doc: "the first retry's backoff: a failed attempt n waits retry_base·2^(n-1), jittered, capped at retry_max"},
	{key: "retry_max", flag: "retry-max", field: "RetryMax", group: true,
		arg: "DURATION", allowed: "retry_base to " + short(runtime.RetryMaxMax), def: short(runtime.RetryMaxDefault),
		read: readDuration, check: func(v value, c runtime.Config, name func(string) string) string {
			return inRange(v, int64(c.RetryBase), int64(runtime.RetryMaxMax), fmt.Sprintf("allowed %s (%s) to %s", short(c.RetryBase), name("retry_base"), short(runtime.RetryMaxMax)))
		},
		doc: "the retry backoff's cap"},
	{key: "retention", flag: "retention", field: "Retention", group: true,
		arg: "DURATION|keep", allowed: "above 0, or keep", def: short(runtime.RetentionDefault),
		read: readOr("keep", readDuration), check: retention,
		doc: "delete completed jobs older than this; keep (or a negative duration) never does"},
	{key: "dead_retention", flag: "dead-retention", field: "DeadRetention", group: true,
		arg: "DURATION|keep", allowed: "above 0, or keep", def: short(runtime.DeadRetentionDefault),
		read: readOr("keep", readDuration), check: retention,
		doc: "delete dead and cancelled jobs older than this; keep (or a negative duration) never does"},
	{key: "listener_ping_interval", flag: "listener-ping-interval", field: "ListenerPingInterval", group: true,
		arg: "DURATION", allowed: span(listener.PingIntervalMin, listener.PingIntervalMax), def: short(listener.PingIntervalDefault),
		read: readDuration, check: durations(listener.PingIntervalMin, listener.PingIntervalMax),
		doc: "notify mode: how long the listener's connection may stay silent before it is checked, which finds a half-open one"},
	{key: "listener_ping_timeout", flag: "listener-ping-timeout", field: "ListenerPingTimeout", group: true,
		arg: "DURATION", allowed: span(listener.PingTimeoutMin, listener.PingTimeoutMax), def: short(listener.PingTimeoutDefault),
		read: readDuration, check: durations(listener.PingTimeoutMin, listener.PingTimeoutMax),
		doc: "notify mode: how long each check of the listener's connection may take"},
	{key: "liveness_interval", flag: "liveness-interval", field: "LivenessInterval", group: true,
		arg: "DURATION", allowed: span(runtime.LivenessIntervalMin, runtime.LivenessIntervalMax), def: short(runtime.LivenessIntervalDefault),
		read: readDuration, check: durations(runtime.LivenessIntervalMin, runtime.LivenessIntervalMax),
		doc: "how often the worker refreshes its row in fila_workers; one that missed three refreshes counts as gone in stats, the dashboard, the metrics and migrate"},
	{key: "hard_stop_grace", flag: "hard-stop-grace", field: "HardStopGrace", group: true,
		arg: "DURATION", allowed: "above 0", def: short(runtime.HardStopGraceDefault),
		read: readDuration, check: atLeast(1, ""),
		doc: "once running jobs are cancelled, how long their handlers and what is left to write get before the worker gives up and exits"},
}

// goOnly are the runtime.Config fields no setting reaches, with the reason.
var goOnly = map[string]string{
	"Pool":             "a pool is a Go value: fila opens its own from dsn",
	"Kinds.Handler":    "a Go function: exec's COMMAND runs in its place",
	"Kinds.Backoff":    "a Go function: exec's kinds back off by retry_base and retry_max",
	"Kinds.Aliases":    "a rename of a Go kind; an --exec command takes its old name as another --exec KIND=COMMAND",
	"Middleware":       "Go functions around handlers",
	"InsertMiddleware": "Go functions around the recurring tasks' inserts",
	"Observer":         "a Go value: metrics_addr attaches fila's own",
	"Logger":           "a Go value: --log-level and --log-format shape fila's own",
	"ErrorHandler":     "a Go value: fila work logs each failed attempt itself",
	"StuckJobHandler":  "a Go function",
	"StuckAfter":       "it goes with StuckJobHandler, a Go function; fila work has no setting for it yet",
}

// lookupSetting returns the setting of a key.
func lookupSetting(key string) *setting {
	i := slices.IndexFunc(settings, func(s setting) bool { return s.key == key })
	if i < 0 {
		panic("no setting " + key)
	}
	return &settings[i]
}

// settingKeys are the keys the file takes at its top (top) or in a group.
func settingKeys(top bool) []string {
	var keys []string
	for _, s := range settings {
		if (top && s.top) || (!top && s.group) {
			keys = append(keys, strings.SplitN(s.key, ".", 2)[0])
		}
	}
	return slices.Compact(keys)
}

// flagName is the flag of the setting of key: --lease for lease.
func flagName(key string) string { return "--" + lookupSetting(key).flag }

// usage is a setting's line in `fila help work`.
func (s *setting) usage() string {
	form := "`" + s.arg + "`"
	if s.allowed != "" {
		form += ": " + s.allowed
	}
	if s.def != "" {
		form += "; default " + s.def
	}
	return fmt.Sprintf("%s (%s; in a file: %s)", s.doc, form, s.key)
}

// flagArgs collects the arguments of a setting's flag as written: they are
// read and checked by the code that reads the file's values, with the
// file's messages.
type flagArgs struct{ args []string }

func (f *flagArgs) String() string     { return "" } // help gives the default in the usage
func (f *flagArgs) Set(v string) error { f.args = append(f.args, v); return nil }

// boolArgs are the arguments of a flag that needs no value.
type boolArgs struct{ flagArgs }

func (*boolArgs) IsBoolFlag() bool { return true }

// addSettingFlags defines a flag for each setting that has one, but the
// global ones, and returns their arguments by flag name.
func addSettingFlags(fs *flag.FlagSet) map[string]*flagArgs {
	args := map[string]*flagArgs{}
	for i := range settings {
		s := &settings[i]
		if s.flag == "" || slices.Contains(globalFlags, s.flag) {
			continue
		}
		if s.boolean {
			b := &boolArgs{}
			args[s.flag] = &b.flagArgs
			fs.Var(b, s.flag, s.usage())
			continue
		}
		args[s.flag] = &flagArgs{}
		fs.Var(args[s.flag], s.flag, s.usage())
	}
	return args
}

// raw is one value as written: a flag's argument, or a value of the file.
type raw struct {
	text string
	n    *yaml.Node                  // the file's value; nil for a flag's argument
	env  func(string) (string, bool) // resolves the file's references
}

// value is a setting's value as read, and where it was written.
type value struct {
	n    int64  // a number or a duration
	s    string // text
	text string // as written, for messages
	at   origin
}

// scalar returns a single value's text; a file's value may be no list or
// mapping, and not empty.
func (r raw) scalar() (string, error) {
	if r.n == nil {
		return r.text, nil
	}
	n := resolved(r.n)
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("want a single value, got %s", describeNode(n))
	}
	if n.ShortTag() == "!!null" || n.Value == "" {
		return "", errors.New("is empty")
	}
	return n.Value, nil
}

func readText(r raw) (value, error) {
	s, err := r.scalar()
	return value{s: s, text: s}, err
}

// readSchema reads a schema's name, refusing one Fila cannot use.
func readSchema(r raw) (value, error) {
	v, err := readText(r)
	if err == nil {
		err = channel.ValidateSchema(v.s)
	}
	return v, err
}

// readInt reads a whole number: in a file, a number rather than text. One
// beyond 64 bits reads as the farthest there is, for its check to say so.
func readInt(r raw) (value, error) {
	s, err := r.scalar()
	if err != nil {
		return value{}, err
	}
	s = strings.TrimSpace(s)
	if r.n != nil && resolved(r.n).ShortTag() != "!!int" {
		return value{}, fmt.Errorf("want a whole number, got %s", describeNode(resolved(r.n)))
	}
	var n int64
	if r.n != nil {
		err = resolved(r.n).Decode(&n)
	} else if n, err = strconv.ParseInt(s, 10, 64); err != nil && !errors.Is(err, strconv.ErrRange) {
		return value{}, fmt.Errorf("want a whole number, got %q", s)
	}
	if err != nil {
		n = math.MaxInt64
		if strings.HasPrefix(s, "-") {
			n = math.MinInt64
		}
	}
	return value{n: n, text: s}, nil
}

// readDuration reads a duration with its unit.
func readDuration(r raw) (value, error) {
	s, err := r.scalar()
	if err != nil {
		return value{}, err
	}
	d, err := parseDuration(s)
	if err != nil {
		return value{}, err
	}
	return value{n: int64(d), text: s}, nil
}

// readOr reads word as -1 (off, keep), anything else with read.
func readOr(word string, read func(raw) (value, error)) func(raw) (value, error) {
	return func(r raw) (value, error) {
		if s, err := r.scalar(); err == nil && s == word {
			return value{n: -1, s: s, text: s}, nil
		}
		return read(r)
	}
}

// orWord is check, but for the word readOr reads.
func orWord(word string, check func(value, runtime.Config, func(string) string) string) func(value, runtime.Config, func(string) string) string {
	return func(v value, c runtime.Config, name func(string) string) string {
		if v.s == word {
			return ""
		}
		return check(v, c, name)
	}
}

// readBool reads true or false: in a file, a boolean rather than text.
func readBool(r raw) (value, error) {
	s, err := r.scalar()
	if err != nil {
		return value{}, err
	}
	b, err := strconv.ParseBool(s)
	if err != nil || (r.n != nil && resolved(r.n).ShortTag() != "!!bool") {
		got := strconv.Quote(s)
		if r.n != nil {
			got = describeNode(resolved(r.n))
		}
		return value{}, fmt.Errorf("want true or false, got %s", got)
	}
	v := value{s: strconv.FormatBool(b), text: s}
	if b {
		v.n = 1
	}
	return v, nil
}

func readChoice(choices ...string) func(raw) (value, error) {
	return func(r raw) (value, error) {
		v, err := readText(r)
		if err == nil && !slices.Contains(choices, v.s) {
			err = fmt.Errorf("%q is not one of %s", v.s, strings.Join(choices, ", "))
		}
		return v, err
	}
}

// readAddr reads HOST:PORT. An empty flag serves nothing.
func readAddr(r raw) (value, error) {
	v, err := readText(r)
	if err == nil && v.s != "" {
		if _, _, err := net.SplitHostPort(v.s); err != nil {
			return v, fmt.Errorf("%q: want HOST:PORT such as 127.0.0.1:9090 or :9090", v.s)
		}
	}
	return v, err
}

// readSecret reads a connection or a token: literal on the command line,
// only a reference in a file (see secret).
func readSecret(example string, checkDefault func(string) error) func(raw) (value, error) {
	return func(r raw) (value, error) {
		if r.n == nil {
			return value{s: r.text, text: r.text}, nil
		}
		s, err := secret(r, example, checkDefault)
		return value{s: s, text: resolved(r.n).Value}, err
	}
}

// inRange says what is wrong with v outside [lo, hi]; describe is the
// range as the message gives it.
func inRange(v value, lo, hi int64, describe string) string {
	switch {
	case v.n >= lo && v.n <= hi:
		return ""
	case v.n < 0 && lo >= 0:
		return v.text + " is negative: " + describe
	}
	return v.text + " is out of range: " + describe
}

// wholeIn checks a whole number within [lo, hi]; describe, if given, is how
// the range reads.
func wholeIn(lo, hi int, describe ...string) func(value, runtime.Config, func(string) string) string {
	d := fmt.Sprintf("allowed %d to %d", lo, hi)
	if len(describe) > 0 {
		d = describe[0]
	}
	return func(v value, _ runtime.Config, _ func(string) string) string {
		return inRange(v, int64(lo), int64(hi), d)
	}
}

// span is how help writes a range of durations.
func span(lo, hi time.Duration) string { return short(lo) + " to " + short(hi) }

// short writes a duration as time.Duration does, less the zero units it
// ends with: 10m, not 10m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func durations(lo, hi time.Duration) func(value, runtime.Config, func(string) string) string {
	return func(v value, _ runtime.Config, _ func(string) string) string {
		return inRange(v, int64(lo), int64(hi), "allowed "+span(lo, hi))
	}
}

// atLeast checks a duration of lo or more, lo 1 for "above 0"; note, if
// given, follows the range.
func atLeast(lo time.Duration, note string) func(value, runtime.Config, func(string) string) string {
	d := "must be at least " + short(lo)
	if lo == 1 {
		d = "must be above 0"
	}
	if note != "" {
		d += " (" + note + ")"
	}
	return func(v value, _ runtime.Config, _ func(string) string) string {
		return inRange(v, int64(lo), math.MaxInt64, d)
	}
}

// token checks a token of the dashboard: long enough to resist guessing.
// One left out by ${VAR:-} is no token.
func token(v value, _ runtime.Config, _ func(string) string) string {
	if n := len(v.s); n > 0 && n < ui.TokenMinLen {
		return fmt.Sprintf("the token is %s long: at least %d are needed (such as openssl rand -hex 16)", plural(n, "character"), ui.TokenMinLen)
	}
	return ""
}

// retention checks a retention: above 0, or keep (which a negative
// duration also means, as in runtime.Config).
func retention(v value, _ runtime.Config, _ func(string) string) string {
	if v.n == 0 {
		return "want a duration above 0 such as 72h, or keep to never delete them; got " + v.text
	}
	return ""
}
