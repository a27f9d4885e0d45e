package claimer

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// DB is what the store needs: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Attempt identifies one attempt of a job: what every write after the claim
// is fenced on. Attempt counts the attempts used; StartedAt tells apart two
// claims with the same count (an interrupted attempt is not counted, and an
// operator's retry resets the count).
type Attempt struct {
	ID        int64
	Attempt   int
	StartedAt time.Time
}

// AttemptKey is an Attempt usable as a map key.
type AttemptKey struct {
	ID      int64
	Attempt int
	Started int64 // StartedAt in microseconds, the database's precision
}

// Key returns a's map key.
func (a Attempt) Key() AttemptKey {
	return AttemptKey{ID: a.ID, Attempt: a.Attempt, Started: a.StartedAt.UnixMicro()}
}

// Job is one claimed attempt of a job.
type Job struct {
	Attempt
	Queue       string
	Kind        string
	Payload     json.RawMessage
	Priority    int16
	MaxAttempts int
	CreatedAt   time.Time
	// Wait is how long the job waited to be claimed, from the later of its
	// created_at and run_at, on the database clock.
	Wait time.Duration
	// Metadata is the job's metadata as JSON, nil when it has none; Tags its
	// tags.
	Metadata json.RawMessage
	Tags     []string
	// Policy is the job's own timeout and retry policy as JSON (the
	// runtime's InsertOpts.Timeout and Retry), nil when it has none.
	Policy json.RawMessage
}

// ClaimResult is what one claim round trip returns.
type ClaimResult struct {
	Jobs    []*Job
	Rescued int // expired leases returned to pending (or dead) by this round trip
	// NextDue is how long until the next scheduled job of the queue (of the
	// kinds asked for) or the next lease expiry, on the database clock;
	// HasNextDue is false when nothing is due or the batch came back full.
	NextDue    time.Duration
	HasNextDue bool
}

// Store runs Fila's SQL against a database.
type Store struct {
	db       Conn
	mode     pgx.QueryExecMode
	hasMode  bool
	explicit atomic.Bool // see SetExplicitIsolation
	log      *zap.Logger
	worker   *string // recorded in fila_jobs.worker by each claim; nil records none
}

// New returns a Store on db.
func New(db Conn) *Store { return &Store{db: db} }

// SetWorker makes every claim of s record worker, the id of the worker's
// row in fila_workers, as the owner of the attempts it claims. Call it
// before the Store is used.
func (s *Store) SetWorker(worker string) { s.worker = &worker }

// SetStatementMode makes every statement of s run in mode, whatever the
// default of db's connections. Call it before the Store is used.
func (s *Store) SetStatementMode(mode pgx.QueryExecMode) { s.mode, s.hasMode = mode, true }

// args is a statement's arguments, led by the Store's statement mode when
// it has one (pgx takes a QueryExecMode as the first argument).
func (s *Store) args(a ...any) []any {
	if !s.hasMode {
		return a
	}
	return append([]any{s.mode}, a...)
}

// KindLimit caps the running jobs of one kind per concurrency key, across
// every worker: the key is the payload's value at the dotted path Key ("" when
// absent).
type KindLimit struct {
	Kind string
	Key  string // a dotted path into the payload, such as "account.id"
	Max  int
}

// KindRate caps the starts of one kind per period of time, across every
// worker: at most Max jobs with the same key (the payload's value at the
// dotted path Key, "" when absent) start in any window of Period.
type KindRate struct {
	Kind   string
	Key    string
	Max    int
	Period time.Duration
}

// Claim marks up to limit runnable jobs of queue whose kind is one of kinds
// as running for lease, in one round trip, and returns them. Kinds with a
// limit in limits are claimed only while their key has a free slot; a
// paused queue gives nothing.
func (s *Store) Claim(ctx context.Context, queue string, kinds []string, limits []KindLimit, limit int, lease time.Duration) (ClaimResult, error) {
	return s.ClaimRated(ctx, queue, kinds, limits, nil, limit, lease)
}

// ClaimRated claims as Claim does, and takes jobs of the kinds in rates
// only while their key has a start left in its period. When the claim
// comes back short because keys are out of starts, NextDue is at the
// latest when the first of them has a start again.
func (s *Store) ClaimRated(ctx context.Context, queue string, kinds []string, limits []KindLimit, rates []KindRate,
	limit int, lease time.Duration) (ClaimResult, error) {
	return s.ClaimRatedInto(ctx, nil, queue, kinds, limits, rates, limit, lease)
}

// ClaimBuffer is where a claim puts its jobs for the next claim made with
// it to reuse: the result's jobs are valid only until then. A claimer that
// copies what it keeps of each job (the runtime does) saves an allocation
// of every job's record, some 190 bytes a job in a drain.
type ClaimBuffer struct {
	jobs []Job
	ptrs []*Job
	used int // jobs holding the last claim's, cleared by the next
}

// ClaimRatedInto claims as ClaimRated does, into buf when it is not nil.
func (s *Store) ClaimRatedInto(ctx context.Context, buf *ClaimBuffer, queue string, kinds []string, limits []KindLimit,
	rates []KindRate, limit int, lease time.Duration) (ClaimResult, error) {
	var res ClaimResult
	lk, lp, lm := make([]string, len(limits)), make([]string, len(limits)), make([]int32, len(limits))
	for i, l := range limits {
		lk[i], lp[i], lm[i] = l.Kind, l.Key, int32(max(min(l.Max, math.MaxInt32), 0))
	}
	r := claimRates{kinds: make([]string, len(rates)), paths: make([]string, len(rates)),
		max: make([]int32, len(rates)), periodMs: make([]float64, len(rates))}
	for i, l := range rates {
		r.kinds[i], r.paths[i], r.max[i], r.periodMs[i] = l.Kind, l.Key, int32(max(min(l.Max, math.MaxInt32), 0)), ms(l.Period)
	}
	err := s.inSession(ctx, func() error {
		res = ClaimResult{}
		return s.claim(ctx, &res, buf, queue, kinds, limit, lease, lk, lp, lm, r)
	})
	if err != nil {
		return res, err
	}
	// Dispatched by priority, then in the order they were enqueued; the
	// claim returns its rows unsorted (a sort in the statement cost every
	// claim its setup, one row or a thousand).
	slices.SortFunc(res.Jobs, func(a, b *Job) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return res, nil
}

// claimRates are a claim's rate limits as the claim takes them: a list per
// field.
type claimRates struct {
	kinds, paths []string
	max          []int32
	periodMs     []float64
}

func (s *Store) claim(ctx context.Context, res *ClaimResult, buf *ClaimBuffer, queue string, kinds []string, limit int,
	lease time.Duration, lk, lp []string, lm []int32, r claimRates) error {
	rows, err := s.query(ctx, sqlClaim, queue, kinds, limit, ms(lease), lk, lp, lm, r.kinds, r.paths, r.max, r.periodMs, s.worker)
	if err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	defer rows.Close()
	// One set of destinations for every row: a batch of a thousand rows
	// scanned into fresh pointers made a dozen allocations a row. The kind
	// is read in place and matched to one of kinds, whose string the job
	// shares; the payload, metadata and policy are read in place too and copied
	// into a block shared by several jobs, as are the jobs themselves
	// (see jobBlock and textBlock).
	var (
		row  claimRow
		scan *claimScan // when the row's format is not readClaimRow's
		// Blocks the rows are copied into.
		jobs []Job
		text []byte
	)
	if !rawClaimRows(rows.FieldDescriptions()) {
		scan = newClaimScan()
	}
	if buf != nil {
		// Sized for the whole claim up front: growing it would move the
		// jobs already pointed to.
		clear(buf.jobs[:buf.used])
		buf.used = 0
		if cap(buf.jobs) < limit {
			buf.jobs, buf.ptrs = make([]Job, limit), make([]*Job, 0, limit)
		}
		jobs, res.Jobs = buf.jobs[:limit], buf.ptrs[:0]
		defer func() { buf.used = len(res.Jobs) }()
	}
	keep := func(b []byte) json.RawMessage {
		if b == nil {
			return nil
		}
		if len(b) > textBlock/4 {
			return json.RawMessage(bytes.Clone(b))
		}
		if cap(text)-len(text) < len(b) {
			text = make([]byte, 0, textBlock)
		}
		start := len(text)
		text = append(text, b...)
		// Capped at its end: a handler appending to its payload copies it
		// rather than writing over the next job's.
		return json.RawMessage(text[start:len(text):len(text)])
	}
	for rows.Next() {
		var err error
		if scan != nil {
			err = scan.read(rows, &row)
		} else {
			err = readClaimRow(rows.RawValues(), &row)
		}
		if err != nil {
			return fmt.Errorf("claim: scan: %w", err)
		}
		if row.idNull { // the summary row
			if !row.rescuedNull {
				res.Rescued = int(row.rescued)
			}
			if !row.nextDueNull && !math.IsNaN(row.nextDueMs) {
				res.HasNextDue = true
				res.NextDue = fromMs(row.nextDueMs)
			}
			continue
		}
		if len(jobs) == 0 {
			jobs = make([]Job, max(1, min(jobBlock, limit-len(res.Jobs))))
		}
		j := &jobs[0]
		jobs = jobs[1:]
		*j = Job{
			Attempt: Attempt{ID: row.id, Attempt: int(row.attempt), StartedAt: row.startedAt},
			Queue:   queue, Kind: kindOf(row.kind, kinds), Payload: keep(row.payload), Priority: row.priority,
			MaxAttempts: int(row.maxAttempts), CreatedAt: row.createdAt, Wait: fromMs(row.waitMs), Tags: row.tags,
			Metadata: keep(row.metadata), Policy: keep(row.policy),
		}
		res.Jobs = append(res.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("claim: %w", err)
	}
	return nil
}

// jobBlock is how many claimed jobs share an allocation, and textBlock the
// size of the blocks their payloads and metadata are copied into (a larger
// one has its own): one allocation per job and two per payload were most
// of a drain's. The runtime copies what it keeps of a job, so a block
// lives only while a payload of it does.
const (
	jobBlock  = 64
	textBlock = 8 << 10
)

// kindOf returns the one of kinds that b names, or a copy of b when none
// does.
func kindOf(b []byte, kinds []string) string {
	for _, k := range kinds {
		if string(b) == k {
			return k
		}
	}
	return string(b)
}

// ClaimID claims the job id for lease if it is still pending and runnable,
// in queue, of one of kinds, and queue is not paused; otherwise it returns
// nil. A notification names the job that woke a worker: claiming it by its
// id is a primary-key probe, where Claim reads the queue's head. Kinds with
// a limit must not be passed: their slots are checked by Claim only.
func (s *Store) ClaimID(ctx context.Context, id int64, queue string, kinds []string, lease time.Duration) (*Job, error) {
	var (
		j        = Job{Queue: queue}
		payload  string
		waitMs   float64
		metadata *string
		policy   *string
	)
	sql := sqlClaimID
	if s.hasMode && s.mode == pgx.QueryExecModeCacheStatement {
		sql = sqlClaimIDDirect // prepared per connection: see its comment
	}
	err := s.inSession(ctx, func() error {
		return s.queryRow(ctx, sql, []any{id, queue, kinds, ms(lease), s.worker}, &j.ID, &j.Kind, &payload, &j.Priority,
			&j.Attempt.Attempt, &j.MaxAttempts, &j.CreatedAt, &j.StartedAt, &waitMs, &metadata, &j.Tags, &policy)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim job %d: %w", id, err)
	}
	j.Payload, j.Wait = json.RawMessage(payload), fromMs(waitMs)
	if metadata != nil {
		j.Metadata = json.RawMessage(*metadata)
	}
	if policy != nil {
		j.Policy = json.RawMessage(*policy)
	}
	return &j, nil
}

// Outcome is the result of one attempt, to be written by Finish.
type Outcome struct {
	Attempt
	OK        bool          // the handler succeeded
	Err       string        // why it failed (kept in last_error and errors)
	Delay     time.Duration // retry backoff when not OK and not Permanent; the snooze when Snooze
	Permanent bool          // failed in a way retrying cannot fix: dead at once
	// Snooze puts the job back to pending, due in Delay, giving its attempt
	// back: the handler asked to run later, nothing failed.
	Snooze bool
	// Output is the JSON the handler recorded, stored with a success; nil
	// for none. At most OutputMax bytes.
	Output []byte
}

// OutputMax bounds a job's output, in bytes of JSON text (the table's
// fila_jobs_output_size).
const OutputMax = 64 << 10

// Finished is how Finish left one attempt.
type Finished struct {
	Key AttemptKey
	// State is the job's new state (completed, pending for a retry, dead, or
	// cancelled for a retry whose unique key another job holds),
	// StateFenced when the attempt is no longer this worker's, or
	// StateSkipped when the row was locked for a moment: write it again.
	State string
	DueIn time.Duration // for a retry: how long until it runs again
}

// States Finish reports besides the job's own (see state.go).
const (
	StateFenced  = "fenced"
	StateSkipped = "skipped"
)

// ErrorTextMax bounds the error text kept per attempt, in bytes.
const ErrorTextMax = 4000

// StorableText makes s storable in a PostgreSQL text column: invalid UTF-8
// becomes U+FFFD, NUL (which text cannot hold) becomes U+2400 (␀), and the
// text is cut to at most max bytes on a rune boundary, with "…" marking the
// cut. A handler's error is data like any other: one that PostgreSQL would
// refuse must not stop its outcome, or anyone else's, from being written.
func StorableText(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\u2400")
	}
	if len(s) <= max {
		return s
	}
	const ellipsis = "…"
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	if cut < 0 {
		cut = 0
	}
	return s[:cut] + ellipsis
}

// Finish writes many outcomes and says how it left each: in one statement
// when they are all plain successes the lean completion takes whole, else
// in one more for the rest. Error texts are made storable first (see
// StorableText).
func (s *Store) Finish(ctx context.Context, outs []Outcome) ([]Finished, error) {
	if len(outs) == 0 {
		return nil, nil
	}
	if !allPlainSuccesses(outs) {
		return s.finish(ctx, outs)
	}
	done, err := s.complete(ctx, outs)
	if err != nil {
		return nil, err
	}
	if len(done) == len(outs) {
		return done, nil
	}
	// What the lean completion left (a unique key, an attempt no longer
	// this worker's, a row locked or deleted): fila_finish says what
	// became of each.
	completed := make(map[AttemptKey]bool, len(done))
	for _, f := range done {
		completed[f.Key] = true
	}
	rest := make([]Outcome, 0, len(outs)-len(done))
	for _, o := range outs {
		if !completed[o.Key()] {
			rest = append(rest, o)
		}
	}
	more, err := s.finish(ctx, rest)
	if err != nil {
		// The completions are committed and must be reported as such (sent
		// again, they would read as fenced): the rest go back as skipped,
		// to be written again shortly.
		if s.log != nil {
			s.log.Warn("outcomes left by the lean completion not written; writing them again shortly",
				zap.Int("outcomes", len(rest)), zap.Error(err))
		}
		for _, o := range rest {
			done = append(done, Finished{Key: o.Key(), State: StateSkipped})
		}
		return done, nil
	}
	return append(done, more...), nil
}

// allPlainSuccesses reports whether every outcome is a success that
// recorded no output: what fila_complete writes.
func allPlainSuccesses(outs []Outcome) bool {
	for _, o := range outs {
		if !o.OK || o.Snooze || o.Output != nil {
			return false
		}
	}
	return true
}

// complete writes plain successes with fila_complete and returns the
// attempts it completed.
func (s *Store) complete(ctx context.Context, outs []Outcome) ([]Finished, error) {
	n := len(outs)
	p := newAttemptParams(n)
	for i, o := range outs {
		p.set(i, o.Attempt)
	}
	var out []Finished
	err := s.inSession(ctx, func() error {
		rows, err := s.query(ctx, sqlComplete, p.ids, p.attempts, p.started)
		if err != nil {
			return err
		}
		defer rows.Close()
		if !rows.Next() {
			if err := rows.Err(); err != nil {
				return err
			}
			return pgx.ErrNoRows
		}
		out, err = readCompleted(rows)
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("complete %d attempts: %w", n, err)
	}
	return out, nil
}

// finish writes any outcomes with fila_finish.
func (s *Store) finish(ctx context.Context, outs []Outcome) ([]Finished, error) {
	n := len(outs)
	p := newAttemptParams(n)
	oks, errs, delays, perms := make([]bool, n), make([]string, n), make([]float64, n), make([]bool, n)
	snoozes, outputs := make([]bool, n), make([]*string, n)
	for i, o := range outs {
		p.set(i, o.Attempt)
		oks[i], perms[i], delays[i], snoozes[i] = o.OK, o.Permanent, ms(o.Delay), o.Snooze
		if !o.OK {
			errs[i] = StorableText(o.Err, ErrorTextMax)
		}
		if o.OK && o.Output != nil {
			out := string(o.Output)
			outputs[i] = &out
		}
	}
	var out []Finished
	err := s.inSession(ctx, func() error {
		rows, err := s.query(ctx, sqlFinish, p.ids, p.attempts, p.started, oks, errs, delays, perms, snoozes, outputs)
		if err != nil {
			return err
		}
		defer rows.Close()
		out = make([]Finished, 0, n)
		for rows.Next() {
			var (
				a     Attempt
				state string
				dueMs float64
			)
			if err := rows.Scan(&a.ID, &a.Attempt, &a.StartedAt, &state, &dueMs); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
			out = append(out, Finished{Key: a.Key(), State: state, DueIn: fromMs(dueMs)})
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("finish %d attempts: %w", n, err)
	}
	// fila_finish lists the rows it updated and those it found fenced. An
	// outcome it does not list had its row locked by another statement
	// (write it again), or its job was deleted while it ran (fenced).
	if len(out) < n {
		listed := make(map[AttemptKey]bool, len(out))
		for _, f := range out {
			listed[f.Key] = true
		}
		var missing []Attempt
		for _, o := range outs {
			if k := o.Key(); !listed[k] {
				listed[k] = true
				missing = append(missing, o.Attempt)
			}
		}
		exists, err := s.existing(ctx, missing)
		if err != nil {
			return nil, fmt.Errorf("finish %d attempts: %w", n, err)
		}
		for _, a := range missing {
			state := StateFenced
			if exists[a.ID] {
				state = StateSkipped
			}
			out = append(out, Finished{Key: a.Key(), State: state})
		}
	}
	return out, nil
}

// IsUniqueViolation reports whether err is a unique index refusing a row
// (SQLSTATE 23505). The hot statements look for the holder of a job's
// unique key before they move the job; a job that took the key between
// that look and the write makes the whole statement fail, and the same
// statement sent again finds it (fila_unique_holder, migrations/schema.sql).
func IsUniqueViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505"
}

// IsDataError reports whether err is PostgreSQL refusing a value (SQLSTATE
// class 22: invalid text, a number or interval out of range): sending the
// same statement again cannot succeed, but the other rows of a batch may.
func IsDataError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "22")
}

// HeartbeatStatus is what a heartbeat found of one attempt.
type HeartbeatStatus string

// Heartbeat statuses.
const (
	// Kept: the lease was extended.
	Kept HeartbeatStatus = "kept"
	// Busy: the row was locked by another statement for a moment; the lease
	// is extended at the next heartbeat.
	Busy HeartbeatStatus = "busy"
	// Lost: the attempt is no longer this worker's (rescued after its lease
	// expired, finished, deleted). Its handler must stop.
	Lost HeartbeatStatus = "lost"
	// Cancelled: an operator cancelled the job. Its handler must stop.
	Cancelled HeartbeatStatus = "cancelled"
)

// Heartbeat extends the leases of owned attempts and says, for each, whether
// it is still this worker's.
func (s *Store) Heartbeat(ctx context.Context, owned []Attempt, lease time.Duration) (map[AttemptKey]HeartbeatStatus, error) {
	got := make(map[AttemptKey]HeartbeatStatus, len(owned))
	if len(owned) == 0 {
		return got, nil
	}
	p := split(owned)
	err := s.inSession(ctx, func() error {
		clear(got)
		rows, err := s.query(ctx, sqlHeartbeat, p.ids, p.attempts, p.started, ms(lease))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				a      Attempt
				status string
			)
			if err := rows.Scan(&a.ID, &a.Attempt, &a.StartedAt, &status); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
			got[a.Key()] = HeartbeatStatus(status)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d jobs: %w", len(owned), err)
	}
	// An attempt fila_heartbeat does not list had its row locked by another
	// statement (busy), or its job was deleted while it ran (lost).
	var missing []Attempt
	for _, a := range owned {
		if _, ok := got[a.Key()]; !ok {
			missing = append(missing, a)
		}
	}
	exists, err := s.existing(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("heartbeat %d jobs: %w", len(owned), err)
	}
	for _, a := range missing {
		got[a.Key()] = Lost
		if exists[a.ID] {
			got[a.Key()] = Busy
		}
	}
	return got, nil
}

// existing says which of the attempts' jobs still exist.
func (s *Store) existing(ctx context.Context, as []Attempt) (map[int64]bool, error) {
	if len(as) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	rows, err := s.query(ctx, sqlExisting, ids)
	if err != nil {
		return nil, fmt.Errorf("look up %d jobs: %w", len(ids), err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("look up %d jobs: %w", len(ids), err)
	}
	exists := make(map[int64]bool, len(found))
	for _, id := range found {
		exists[id] = true
	}
	return exists, nil
}

// Release returns owned attempts to pending at once, without counting them
// as attempts, and reports how many it released. The table's update trigger
// wakes the other workers of each queue.
func (s *Store) Release(ctx context.Context, owned []Attempt, reason string) (int, error) {
	if len(owned) == 0 {
		return 0, nil
	}
	// fila_release waits for its rows' locks and takes them in the order
	// given. Id order is the order a scan of the primary key takes them in,
	// as the statement did before migration 0008, which keeps a deadlock
	// with another statement locking some of the same rows unlikely (one
	// that happens is broken by PostgreSQL; the attempts then come back
	// when their leases expire).
	owned = slices.SortedFunc(slices.Values(owned), func(a, b Attempt) int { return cmp.Compare(a.ID, b.ID) })
	p := split(owned)
	var released int
	if err := s.inSession(ctx, func() error {
		return s.queryRow(ctx, sqlRelease, []any{p.ids, p.attempts, p.started, StorableText(reason, ErrorTextMax)}, &released)
	}); err != nil {
		return 0, fmt.Errorf("release %d jobs: %w", len(owned), err)
	}
	return released, nil
}

// ErrNotOwner is returned by CompleteTx when the attempt is no longer the
// caller's: its lease was rescued, it was cancelled, or it already finished.
var ErrNotOwner = errors.New("job attempt is no longer owned by this worker (lease lost, cancelled or already finished)")

// CompleteTx completes one attempt inside the caller's transaction, with
// output (JSON, nil for none) as the job's output.
func CompleteTx(ctx context.Context, tx DB, a Attempt, output []byte) error {
	var out *string
	if output != nil {
		s := string(output)
		out = &s
	}
	tag, err := tx.Exec(ctx, sqlCompleteTx, a.ID, a.Attempt, a.StartedAt, out)
	if err != nil {
		return fmt.Errorf("complete job %d in transaction: %w", a.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("complete job %d attempt %d: %w", a.ID, a.Attempt, ErrNotOwner)
	}
	return nil
}

// DeleteFinished deletes up to batch jobs in state (completed, dead or
// cancelled) finished more than olderThan ago, and returns how many it
// deleted.
func (s *Store) DeleteFinished(ctx context.Context, state string, olderThan time.Duration, batch int) (int64, error) {
	var q string
	switch state {
	case StateCompleted:
		q = sqlDeleteCompleted
	case StateDead:
		q = sqlDeleteDead
	case StateCancelled:
		q = sqlDeleteCancelled
	default:
		return 0, fmt.Errorf("delete finished jobs: state %q is not a finished state", state)
	}
	var tag pgconn.CommandTag
	err := s.inSession(ctx, func() (err error) {
		tag, err = s.exec(ctx, q, olderThan.Seconds(), batch)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete %s jobs: %w", state, err)
	}
	return tag.RowsAffected(), nil
}

// DeleteRateStarts deletes up to batch starts of rate-limited kinds that
// stopped counting more than a minute ago, and returns how many it deleted.
func (s *Store) DeleteRateStarts(ctx context.Context, batch int) (int64, error) {
	var tag pgconn.CommandTag
	err := s.inSession(ctx, func() (err error) {
		tag, err = s.exec(ctx, sqlDeleteRateStarts, batch)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete rate starts: %w", err)
	}
	return tag.RowsAffected(), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fromMs(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// Sleep records that worker sleeps on queue, waiting for a notification, if
// no producer transaction on the queue is in flight; it reports whether it
// did. Producers notify only while some worker sleeps on the queue: after
// true, claim once more before waiting (what committed before is seen by
// that claim, what commits after is notified); after false, keep polling.
func (s *Store) Sleep(ctx context.Context, queue, worker string) (bool, error) {
	var slept bool
	if err := s.inSession(ctx, func() error { return s.queryRow(ctx, sqlSleep, []any{queue, worker}, &slept) }); err != nil {
		return false, fmt.Errorf("sleep on queue %s: %w", queue, err)
	}
	return slept, nil
}

// Wake records that worker no longer sleeps on queue: producers may stop
// notifying it, so it must poll until it sleeps again.
func (s *Store) Wake(ctx context.Context, queue, worker string) error {
	if err := s.inSession(ctx, func() error { _, err := s.exec(ctx, sqlWake, queue, worker); return err }); err != nil {
		return fmt.Errorf("wake on queue %s: %w", queue, err)
	}
	return nil
}

// QueueSweep is what Sweep found of one queue.
type QueueSweep struct {
	Queue string
	// Runnable is whether a job of the kinds asked for is due now.
	Runnable bool
	// NextDue is how long until the queue's next scheduled job, on the
	// database clock; HasNextDue is false when none is scheduled.
	NextDue    time.Duration
	HasNextDue bool
	Paused     bool
}

// SweepResult is what one Sweep found.
type SweepResult struct {
	Queues []QueueSweep
	// Expired is whether some running job's lease has expired (any claim
	// rescues it); NextExpiry is how long until the next one does, when
	// HasNextExpiry.
	Expired       bool
	NextExpiry    time.Duration
	HasNextExpiry bool
}

// Sweep looks at every queue of queues in one statement: which have a job
// of kinds due now, when each one's next scheduled job is due, which are
// paused, and whether a lease expired. It is the safety poll of a worker
// serving many queues, which would otherwise claim from each in turn.
func (s *Store) Sweep(ctx context.Context, queues, kinds []string) (SweepResult, error) {
	var res SweepResult
	err := s.inSession(ctx, func() error {
		res = SweepResult{}
		rows, err := s.query(ctx, sqlSweep, queues, kinds)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				q               QueueSweep
				due, nextExpiry *float64
			)
			if err := rows.Scan(&q.Queue, &q.Runnable, &due, &q.Paused, &res.Expired, &nextExpiry); err != nil {
				return fmt.Errorf("scan: %w", err)
			}
			if due != nil {
				q.NextDue, q.HasNextDue = fromMs(*due), true
			}
			if nextExpiry != nil {
				res.NextExpiry, res.HasNextExpiry = fromMs(*nextExpiry), true
			}
			res.Queues = append(res.Queues, q)
		}
		return rows.Err()
	})
	if err != nil {
		return res, fmt.Errorf("sweep %d queues: %w", len(queues), err)
	}
	return res, nil
}
