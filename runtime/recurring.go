package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
)

// Missed says what a recurring task does about slots that passed while no
// worker scheduled it.
type Missed string

const (
	// MissedLatest enqueues the most recent missed slot only. The default.
	MissedLatest Missed = "latest"
	// MissedNone enqueues no missed slot: only slots at most a minute late.
	MissedNone Missed = "none"
)

// missedNoneSlack is how late a slot may be and still count as on time
// under MissedNone.
const missedNoneSlack = time.Minute

// RecurringTask enqueues a job on a schedule. Every worker that declares it
// schedules it; the database makes sure exactly one job is enqueued per time
// slot, however many do.
type RecurringTask struct {
	// Name identifies the task. Required.
	Name string
	// Schedule is a five-field cron expression ("*/5 * * * *": minute, hour,
	// day of month, month, day of week), a descriptor (@hourly, @daily,
	// @weekly, @monthly, @yearly), or "@every DURATION" ("@every 30s"), whose
	// slots are multiples of DURATION since the Unix epoch. Required.
	Schedule string
	// TimeZone is the IANA zone the cron expression is read in. Defaults
	// to UTC.
	TimeZone string
	// Kind, Payload, Queue and MaxAttempts are the enqueued job's; Queue
	// defaults to "default", MaxAttempts to 5. A task with Construct sets
	// Kind to the kind it builds (PeriodicJob does) and no Payload.
	Kind        string
	Payload     any
	Queue       string
	MaxAttempts int
	// Priority, Tags and Metadata are the enqueued job's, as in
	// InsertOpts. Defaults to none.
	Priority int16
	Tags     []string
	Metadata map[string]any
	// UniqueKey, if set, is the job's unique key in place of the slot's
	// own, with UniqueStates as in InsertOpts: a slot whose job would
	// duplicate a job in those states (by default pending or running, such
	// as the previous slot's when it runs longer than the schedule's
	// period) enqueues nothing. A slot still never gets two jobs: it is
	// claimed in fila_recurring in the transaction that enqueues its job.
	// Defaults to the slot's own key, fila:recurring:<task>:<slot>, unique
	// in every state.
	UniqueKey    string
	UniqueStates []string
	// Construct, if set, builds each slot's job when the slot is due, by
	// the one worker that claims the slot: its args (their type's
	// InsertOpts as defaults, under the task's options) and options over
	// both (nil for none). Its job goes through Config.InsertMiddleware as
	// a Client's Insert does. A nil JobArgs enqueues nothing for that slot.
	// A panic is logged as an error and the slot tried again a second
	// later, as after a database error. Use PeriodicJob to declare one.
	// Defaults to none: Kind and Payload.
	Construct func(slot time.Time) (JobArgs, *InsertOpts)
	// RunOnStart enqueues the task's latest slot (the last one at or
	// before now) when the runtime starts, or when AddRecurring adds the
	// task, unless that slot has its job already, whatever Missed says: a
	// new task need not wait for its first slot. Still one job per slot:
	// of several workers starting at once, one enqueues it, and a restart
	// within a slot that has its job enqueues nothing. Defaults to false.
	RunOnStart bool
	// Missed is what to do about slots missed while no worker ran. Defaults
	// to MissedLatest.
	Missed Missed

	// argsQueue is the queue the args' type declares (PeriodicJob), which
	// fila_recurring records before the first slot is enqueued.
	argsQueue string
	// noConstruct marks a PeriodicJob given no construct function.
	noConstruct bool
}

// schedule gives a task's slots: Next returns the first slot after t.
type schedule interface {
	Next(t time.Time) time.Time
}

// everySchedule has a slot at every multiple of d since the Unix epoch, so
// every process computes the same slots whenever it started.
type everySchedule struct{ d time.Duration }

func (e everySchedule) Next(t time.Time) time.Time {
	return t.Truncate(e.d).Add(e.d)
}

// parseSchedule reads a task's schedule in loc.
func parseSchedule(spec string, loc *time.Location) (schedule, error) {
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, fmt.Errorf("schedule %q: want @every and a whole number of seconds, at least 1s (such as @every 30s)", spec)
		}
		return everySchedule{d: d}, nil
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: give the time zone as the task's TimeZone", spec)
	}
	p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	s, err := p.Parse(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return zoned{s: s, loc: loc}, nil
}

// zoned reads a cron schedule in a time zone.
type zoned struct {
	s   cron.Schedule
	loc *time.Location
}

func (z zoned) Next(t time.Time) time.Time { return z.s.Next(t.In(z.loc)) }

// validate checks a task and returns its parsed schedule and payload.
func (t RecurringTask) validate() (schedule, string, error) {
	if strings.TrimSpace(t.Name) == "" || len(t.Name) > 200 {
		return nil, "", errors.New("a task has an empty Name (or one over 200 bytes)")
	}
	loc := time.UTC
	if t.TimeZone != "" {
		l, err := time.LoadLocation(t.TimeZone)
		if err != nil {
			return nil, "", fmt.Errorf("task %q: TimeZone %q: %w", t.Name, t.TimeZone, err)
		}
		loc = l
	}
	if t.Schedule == "" {
		return nil, "", fmt.Errorf("task %q has no Schedule", t.Name)
	}
	s, err := parseSchedule(t.Schedule, loc)
	if err != nil {
		return nil, "", fmt.Errorf("task %q: %w", t.Name, err)
	}
	if t.noConstruct {
		return nil, "", fmt.Errorf("task %q: PeriodicJob was given a nil construct function", t.Name)
	}
	if t.Construct != nil && t.Payload != nil {
		return nil, "", fmt.Errorf("task %q has both a Payload and Construct: Construct builds each slot's payload", t.Name)
	}
	if t.Construct != nil && t.Kind == "" {
		return nil, "", fmt.Errorf("task %q has Construct but no Kind: set the kind it builds (PeriodicJob does)", t.Name)
	}
	p, err := prepare(InsertParams{Kind: t.Kind, Payload: t.Payload, InsertOpts: t.insertOpts()})
	if err != nil {
		return nil, "", fmt.Errorf("task %q: %w", t.Name, err)
	}
	switch t.Missed {
	case "", MissedLatest, MissedNone:
	default:
		return nil, "", fmt.Errorf("task %q: Missed %q: use %q or %q", t.Name, t.Missed, MissedLatest, MissedNone)
	}
	return s, p.payload, nil
}

const (
	sqlRecurringDefine = `INSERT INTO fila_recurring (task, schedule, time_zone, kind, queue, payload, max_attempts, missed, next_slot)
VALUES ($1::text, $2::text, $3::text, $4::text, $5::text, $6::text::jsonb, $7::int, $8::text, $9::timestamptz)
ON CONFLICT (task) DO UPDATE SET schedule = EXCLUDED.schedule, time_zone = EXCLUDED.time_zone,
    kind = EXCLUDED.kind, queue = EXCLUDED.queue, payload = EXCLUDED.payload,
    max_attempts = EXCLUDED.max_attempts, missed = EXCLUDED.missed,
    next_slot = greatest(fila_recurring.next_slot, EXCLUDED.next_slot), updated_at = now()
RETURNING last_slot, now()`

	// Moving last_slot forward is what makes one job per slot: of several
	// workers scheduling the same slot, the first commits, and the others'
	// conditional UPDATE then finds last_slot no longer before the slot.
	sqlRecurringClaimSlot = `UPDATE fila_recurring SET last_slot = $2::timestamptz, next_slot = $3::timestamptz, updated_at = now()
WHERE task = $1::text AND (last_slot IS NULL OR last_slot < $2::timestamptz)
RETURNING kind, queue, payload::text, max_attempts`

	sqlRecurringJob = `UPDATE fila_recurring SET last_job_id = $2::bigint WHERE task = $1::text`

	// A task whose jobs Construct builds records its last job's queue and
	// payload: what it enqueues is known only once a slot is due.
	sqlRecurringBuiltJob = `UPDATE fila_recurring SET last_job_id = $2::bigint, queue = $3::text, payload = $4::text::jsonb
WHERE task = $1::text`

	sqlDBNow = `SELECT now()`
)

// recurringKey is the unique key of a task's job for one slot.
func recurringKey(task string, slot time.Time) string {
	return "fila:recurring:" + task + ":" + slot.UTC().Format(time.RFC3339)
}

// recurringUniqueStates are the states in which a slot's own key holds:
// all of them, so that a slot enqueues once even after its job finished.
var recurringUniqueStates = []string{StatePending, StateRunning, StateCompleted, StateDead, StateCancelled}

// scheduledTask is one task as the scheduler runs it.
type scheduledTask struct {
	RecurringTask
	entry   uint64 // its entry in the runtime's recurringSet
	sched   schedule
	loc     *time.Location
	payload string
	missed  Missed
	defined bool      // recorded in fila_recurring, with its cursor read
	isNew   bool      // fila_recurring had no slot of it when it was recorded
	cursor  time.Time // the last slot handled (enqueued, or found enqueued)
	// caughtUp is set after the first pass since start: slots missed before
	// it were missed while no worker ran (Missed decides), slots missed after
	// it by a stall of this process (all are enqueued, up to catchUpMax).
	caughtUp bool
}

// newScheduledTask prepares a validated task for the scheduler.
func newScheduledTask(e recurringEntry) (*scheduledTask, error) {
	s, payload, err := e.task.validate()
	if err != nil {
		return nil, err // refused when it was declared or added
	}
	loc := time.UTC
	if e.task.TimeZone != "" {
		if loc, err = time.LoadLocation(e.task.TimeZone); err != nil {
			return nil, err
		}
	}
	missed := e.task.Missed
	if missed == "" {
		missed = MissedLatest
	}
	return &scheduledTask{RecurringTask: e.task, entry: e.id, sched: s, loc: loc, payload: payload, missed: missed}, nil
}

// catchUpMax bounds the slots a running scheduler enqueues at once after a
// stall (a long pause of the process, a database that did not answer):
// beyond it, the older ones are handled as missed during downtime.
const catchUpMax = 60

// schedulerLoop enqueues the recurring tasks' jobs on time, on the database
// clock, until ctx ends. It schedules the tasks of the runtime's
// recurringSet, taking up what AddRecurring and RemoveRecurring change
// between two passes.
func (r *Runtime) schedulerLoop(ctx context.Context) error {
	log := r.log.Named("recurring")
	var tasks []*scheduledTask
	var seen uint64 // the version of the set tasks were taken from; a set starts at 1
	for {
		if v, entries := r.recurring.snapshot(); v != seen {
			var err error
			if tasks, err = syncTasks(tasks, entries); err != nil {
				return err
			}
			if seen != 0 || len(tasks) > 0 {
				log.Info("scheduling recurring tasks", zap.Strings("tasks", taskNames(tasks)))
			}
			seen = v
		}
		// The worker's row must list the tasks it schedules, so that no
		// task is taken for orphaned while this worker schedules it, nor the
		// other way round: Run wrote the set of that moment, and a change
		// since then is written here, before its first pass.
		rowStale := r.recurring.rowBehind(seen) && !r.writeRecurring(ctx, log)
		if len(tasks) == 0 {
			// Nothing to schedule until a task is added; a row still to
			// write is tried again meanwhile.
			var retry <-chan time.Time
			if rowStale {
				retry = time.After(5 * time.Second)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-r.recurring.changed:
			case <-retry:
			}
			continue
		}
		now, err := r.dbNow(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("cannot read the database clock; will retry", zap.Error(err))
			if !sleepCtx(ctx, time.Second) {
				return nil
			}
			continue
		}
		next := now.Add(time.Hour)
		if rowStale {
			next = now.Add(5 * time.Second)
		}
		for _, t := range tasks {
			if !t.defined {
				if err := r.defineTask(ctx, t); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					log.Error("cannot record a recurring task; will retry", zap.String("task", t.Name), zap.Error(err))
					next = minTime(next, now.Add(5*time.Second))
					continue
				}
			}
			if err := r.runDue(ctx, log, t, now); err != nil && ctx.Err() == nil {
				log.Error("cannot enqueue a recurring task's job; will retry", zap.String("task", t.Name), zap.Error(err))
				next = minTime(next, now.Add(time.Second))
			}
			if n := t.sched.Next(maxTime(t.cursor, now)); n.Before(next) {
				next = n
			}
		}
		// The timer runs on this host's clock for the span the database
		// clock gives; a few milliseconds late is better than early. A
		// change of the tasks ends the wait.
		timer := time.NewTimer(next.Sub(now) + time.Millisecond + time.Duration(rand.Int64N(int64(time.Millisecond))))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.recurring.changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// syncTasks returns the scheduled tasks of entries, in their order: those
// of tasks kept as they are, with their cursor, and new ones for the
// others.
func syncTasks(tasks []*scheduledTask, entries []recurringEntry) ([]*scheduledTask, error) {
	byEntry := make(map[uint64]*scheduledTask, len(tasks))
	for _, t := range tasks {
		byEntry[t.entry] = t
	}
	out := make([]*scheduledTask, 0, len(entries))
	for _, e := range entries {
		if t, ok := byEntry[e.id]; ok {
			out = append(out, t)
			continue
		}
		t, err := newScheduledTask(e)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

func taskNames(tasks []*scheduledTask) []string {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = t.Name
	}
	return names
}

// writeRecurring records in the worker's row the tasks it schedules now,
// and reports whether it could.
func (r *Runtime) writeRecurring(ctx context.Context, log *zap.Logger) bool {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.registry.write(wctx, r.wakeState()); err != nil {
		if ctx.Err() == nil {
			log.Warn("cannot record in fila_workers the recurring tasks this worker schedules; will retry", zap.Error(err))
		}
		return false
	}
	return true
}

// defineTask records the task and reads its last slot: where the cursor
// starts.
func (r *Runtime) defineTask(ctx context.Context, t *scheduledTask) error {
	tz := t.TimeZone
	if tz == "" {
		tz = "UTC"
	}
	queue := cmp.Or(t.Queue, t.argsQueue, "default")
	maxAttempts := cmp.Or(t.MaxAttempts, 5)
	var last *time.Time
	var now time.Time
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := r.store.QueryRow(cctx, sqlRecurringDefine, []any{t.Name, t.Schedule, tz, t.Kind, queue, t.payload,
		maxAttempts, string(t.missed), t.sched.Next(time.Now())}, &last, &now)
	if err != nil {
		return fmt.Errorf("record recurring task %q: %w", t.Name, err)
	}
	if last != nil {
		t.cursor = *last
	} else {
		// A new task starts with the next slot: nothing was missed.
		t.cursor, t.isNew = now, true
	}
	t.defined = true
	return nil
}

// runDue enqueues the task's latest slot at or before now if it is due:
// after the cursor, and on time or allowed by the task's Missed (or, on the
// first pass, by RunOnStart).
func (r *Runtime) runDue(ctx context.Context, log *zap.Logger, t *scheduledTask, now time.Time) error {
	if !t.caughtUp && t.RunOnStart {
		latest, ok := latestSlot(t.sched, now)
		switch {
		case ok && (t.isNew || latest.After(t.cursor)):
			if err := r.enqueueSlot(log, t, latest, now); err != nil {
				return err // the first pass again, next time
			}
			// A slot after it may fall before the moment a new task was
			// recorded: the cursor starts at this one, not there.
			t.cursor = latest
		case ok:
			log.Debug(slotTakenMsg, zap.String("task", t.Name), zap.Time("slot", latest))
		}
		t.caughtUp = true
		return nil
	}
	slots := dueSlots(t.sched, t.cursor, now, catchUpMax)
	if len(slots) == 0 {
		return nil
	}
	if !t.caughtUp || slots[0].After(t.sched.Next(t.cursor)) {
		// Slots were missed while no worker ran, or more than catchUpMax in a
		// stall: the task's Missed policy decides, about the latest only.
		latest := slots[len(slots)-1]
		slots = slots[len(slots)-1:]
		if t.missed == MissedNone && now.Sub(latest) > missedNoneSlack {
			log.Info("skipping missed slots of a recurring task", zap.String("task", t.Name), zap.Time("latest", latest))
			t.cursor, t.caughtUp = latest, true
			return nil
		}
	}
	t.caughtUp = true
	for _, slot := range slots {
		if err := r.enqueueSlot(log, t, slot, now); err != nil {
			return err
		}
		t.cursor = slot
	}
	return nil
}

// What enqueueSlot found a slot to be.
const (
	slotEnqueued  = "enqueued"
	slotTaken     = "taken"     // another worker enqueued it (or a later slot)
	slotDuplicate = "duplicate" // its job would duplicate an existing one
	slotSkipped   = "skipped"   // Construct returned no job
)

const slotTakenMsg = "a recurring task's slot has its job already"

// enqueueSlot enqueues one slot's job, unless another worker has (or a later
// slot already was).
func (r *Runtime) enqueueSlot(log *zap.Logger, t *scheduledTask, slot, now time.Time) error {
	var res Inserted
	var found string
	// Not cut short by a stop: a transaction cancelled while its COMMIT is
	// on the wire may commit without the worker knowing, and the slot's
	// job would be enqueued unreported. Only a database that does not
	// answer by the end of the stop's grace cuts it.
	cctx, cancel := context.WithTimeout(r.lastCtx, 10*time.Second)
	defer cancel()
	err := pgx.BeginTxFunc(cctx, r.control, readCommitted, func(tx pgx.Tx) error {
		if err := r.store.SetLocalTimeout(cctx, tx); err != nil {
			return err
		}
		var kind, queue, payload string
		var maxAttempts int
		err := tx.QueryRow(cctx, sqlRecurringClaimSlot, t.Name, slot, t.sched.Next(slot)).Scan(&kind, &queue, &payload, &maxAttempts)
		if errors.Is(err, pgx.ErrNoRows) {
			found = slotTaken
			return nil
		}
		if err != nil {
			return err
		}
		// Built only by the worker that claimed the slot: Construct runs
		// once per slot, however many workers schedule the task.
		p, err := t.slotJob(slot, kind, queue, payload, maxAttempts)
		if err != nil {
			return err
		}
		if p == nil {
			found = slotSkipped
			return nil
		}
		out, err := r.insertChain(plainInsert(cctx, tx), []*InsertParams{p})
		if err != nil {
			return err
		}
		if len(out) != 1 {
			return fmt.Errorf("insert middleware returned %d results for one job", len(out))
		}
		if res = out[0]; res.Duplicate {
			found = slotDuplicate
			return nil
		}
		found = slotEnqueued
		if t.Construct == nil {
			_, err = tx.Exec(cctx, sqlRecurringJob, t.Name, res.ID)
			return err
		}
		built, err := json.Marshal(p.Payload)
		if err != nil {
			return err
		}
		_, err = tx.Exec(cctx, sqlRecurringBuiltJob, t.Name, res.ID, cmp.Or(p.Queue, "default"), string(built))
		return err
	})
	if err != nil {
		return err
	}
	fields := []zap.Field{zap.String("task", t.Name), zap.Time("slot", slot)}
	switch found {
	case slotEnqueued:
		log.Info("enqueued a recurring task's job", append(fields, zap.Int64("job_id", res.ID), zap.Duration("late", now.Sub(slot)))...)
	case slotTaken:
		log.Debug(slotTakenMsg, fields...)
	case slotDuplicate:
		log.Info("a recurring task's slot enqueued nothing: its job would duplicate an existing one",
			append(fields, zap.Int64("job_id", res.ID), zap.String("state", res.DuplicateState))...)
	case slotSkipped:
		log.Debug("a recurring task's Construct enqueued nothing for the slot", fields...)
	}
	return nil
}

// latestSlot returns the last slot of s at or before now, looking back at
// most a few years.
func latestSlot(s schedule, now time.Time) (time.Time, bool) {
	if e, ok := s.(everySchedule); ok {
		return now.Truncate(e.d), true
	}
	// Widening windows keep the walk short: a minutely schedule finds its
	// slot in the first hour, a yearly one within a year.
	for _, back := range []time.Duration{time.Hour, 24 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour, 8 * 367 * 24 * time.Hour} {
		if slots := dueSlots(s, now.Add(-back), now, 1); len(slots) > 0 {
			return slots[0], true
		}
	}
	return time.Time{}, false
}

// dueSlots returns the slots of s after after and at or before now, oldest
// first: all of them when there are at most max, else the latest max.
func dueSlots(s schedule, after, now time.Time, max int) []time.Time {
	var out []time.Time
	if e, ok := s.(everySchedule); ok {
		first, last := s.Next(after), now.Truncate(e.d)
		if first.After(now) {
			return nil
		}
		n := int(last.Sub(first)/e.d) + 1
		if n > max {
			first = last.Add(-time.Duration(max-1) * e.d)
		}
		for t := first; !t.After(last); t = t.Add(e.d) {
			out = append(out, t)
		}
		return out
	}
	for slot, i := s.Next(after), 0; !slot.After(now) && i < 1_000_000; slot, i = s.Next(slot), i+1 {
		out = append(out, slot)
		if len(out) > max {
			out = out[1:]
		}
	}
	return out
}

func (r *Runtime) dbNow(ctx context.Context) (time.Time, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var now time.Time
	err := r.store.QueryRow(cctx, sqlDBNow, nil, &now)
	return now, err
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sleepCtx waits d, or returns false as soon as ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// RecurringTaskState is one recurring task as fila_recurring records it.
type RecurringTaskState struct {
	Name     string `json:"name"`
	Schedule string `json:"schedule"`
	TimeZone string `json:"time_zone"`
	Kind     string `json:"kind"`
	Queue    string `json:"queue"`
	// Payload is the task's. For a task whose jobs Construct builds it is
	// {} when a worker records the task, then the payload of each slot's
	// job once enqueued, and Queue that job's queue.
	Payload   json.RawMessage `json:"payload"`
	Missed    Missed          `json:"missed"`
	LastSlot  *time.Time      `json:"last_slot"`
	LastJobID *int64          `json:"last_job_id"`
	NextSlot  *time.Time      `json:"next_slot"`
	UpdatedAt time.Time       `json:"updated_at"`
	// Schedulers counts the live workers that schedule the task (see
	// Config.LivenessInterval). With none it is orphaned: no job is
	// enqueued for it, and NextSlot passes without one, until a worker
	// that declares it starts again.
	Schedulers int  `json:"schedulers"`
	Orphaned   bool `json:"orphaned"`
}

const (
	sqlRecurringList = `SELECT task, schedule, time_zone, kind, queue, payload::text, missed, last_slot, last_job_id,
    next_slot, updated_at,
    (SELECT count(*) FROM fila_workers w WHERE fila_worker_live(w) AND r.task = ANY (w.recurring))::int
FROM fila_recurring r ORDER BY task`

	// A task some live worker schedules stays: that worker would enqueue
	// nothing more for it, silently.
	sqlRecurringDelete = `WITH live AS (
    SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') AS ids FROM fila_workers w
    WHERE fila_worker_live(w) AND $1::text = ANY (w.recurring)
), gone AS (
    DELETE FROM fila_recurring r WHERE r.task = $1::text AND (SELECT cardinality(ids) FROM live) = 0
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM fila_recurring WHERE task = $1::text), (SELECT ids FROM live), EXISTS (SELECT 1 FROM gone)`
)

// ErrTaskScheduled is wrapped by DeleteRecurringTask's error when a live
// worker still schedules the task.
var ErrTaskScheduled = errors.New("a live worker schedules it")

// DeleteRecurringTask forgets a recurring task that no live worker
// schedules any more (removed from every worker's configuration): it is no
// longer listed, nor reported as orphaned. It reports whether there was
// such a task. A task a live worker schedules is refused, with an error
// wrapping ErrTaskScheduled that names the workers: remove it from their
// configuration and restart them first. The task's jobs stay.
func DeleteRecurringTask(ctx context.Context, db DB, name string) (bool, error) {
	var existed, deleted bool
	var workers []string
	if err := db.QueryRow(ctx, sqlRecurringDelete, name).Scan(&existed, &workers, &deleted); err != nil {
		return false, fmt.Errorf("delete recurring task %q: %w", name, err)
	}
	if existed && !deleted {
		return false, fmt.Errorf("recurring task %q: %w (%s): remove it from their configuration and restart them first",
			name, ErrTaskScheduled, strings.Join(workers, ", "))
	}
	return deleted, nil
}

// RecurringTasks lists the recurring tasks workers have recorded, with each
// one's last and next slot and how many live workers schedule it.
func RecurringTasks(ctx context.Context, db DB) ([]RecurringTaskState, error) {
	rows, err := db.Query(ctx, sqlRecurringList)
	if err != nil {
		return nil, fmt.Errorf("list recurring tasks: %w", err)
	}
	defer rows.Close()
	out := []RecurringTaskState{}
	for rows.Next() {
		var s RecurringTaskState
		var payload, missed string
		if err := rows.Scan(&s.Name, &s.Schedule, &s.TimeZone, &s.Kind, &s.Queue, &payload, &missed,
			&s.LastSlot, &s.LastJobID, &s.NextSlot, &s.UpdatedAt, &s.Schedulers); err != nil {
			return nil, fmt.Errorf("list recurring tasks: %w", err)
		}
		s.Payload, s.Missed, s.Orphaned = json.RawMessage(payload), Missed(missed), s.Schedulers == 0
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list recurring tasks: %w", err)
	}
	return out, nil
}
