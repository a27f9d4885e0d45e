package runtime

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"time"
)

// PeriodicJob declares a recurring task whose job is built from typed args
// when each slot is due. construct gets the slot, in the task's TimeZone,
// and returns the slot's args and the options over what their type
// declares (nil for none); a nil T (of a pointer type) enqueues nothing
// for that slot. The job's kind is T's. Set the returned task's other
// fields (TimeZone, RunOnStart, Priority, Tags, …) before giving it to
// Config.Recurring or AddRecurring.
func PeriodicJob[T JobArgs](name, schedule string, construct func(slot time.Time) (T, *InsertOpts)) RecurringTask {
	t := RecurringTask{Name: name, Schedule: schedule}
	if construct == nil {
		t.noConstruct = true
		return t
	}
	var zero T
	t.Kind = zero.Kind()
	if d, ok := any(zero).(JobArgsWithInsertOpts); ok {
		t.argsQueue = d.InsertOpts().Queue
	}
	t.Construct = func(slot time.Time) (JobArgs, *InsertOpts) {
		args, opts := construct(slot)
		return args, opts
	}
	return t
}

// insertOpts are the options the task sets itself.
func (t RecurringTask) insertOpts() InsertOpts {
	return InsertOpts{Queue: t.Queue, MaxAttempts: t.MaxAttempts, Priority: t.Priority, Tags: t.Tags,
		Metadata: t.Metadata, UniqueKey: t.UniqueKey, UniqueStates: t.UniqueStates}
}

// slotJob is the job of one slot, or nil when Construct skips it: the
// task's own, with the kind, queue, payload and max attempts fila_recurring
// holds (the last definition recorded, whichever worker recorded it), or
// the one Construct builds, with the args' type's options under the task's
// under Construct's.
func (t *scheduledTask) slotJob(slot time.Time, kind, queue, payload string, maxAttempts int) (*InsertParams, error) {
	opts := t.insertOpts()
	var p InsertParams
	if t.Construct == nil {
		opts.Queue, opts.MaxAttempts = queue, maxAttempts
		p = InsertParams{Kind: kind, Payload: json.RawMessage(payload), InsertOpts: opts}
	} else {
		args, over, err := t.construct(slot.In(t.loc))
		if err != nil {
			return nil, err
		}
		if isNilArgs(args) {
			return nil, nil
		}
		if k := args.Kind(); k != t.Kind {
			return nil, fmt.Errorf("Construct built a job of kind %q; the task's Kind is %q", k, t.Kind)
		}
		if over != nil {
			opts = opts.overriddenBy(*over)
		}
		if p, err = argsParams(args, &opts); err != nil {
			return nil, err
		}
	}
	if p.UniqueKey == "" && len(p.UniqueStates) == 0 {
		p.UniqueKey, p.UniqueStates = recurringKey(t.Name, slot), recurringUniqueStates
	}
	return &p, nil
}

// construct calls Construct, making a panic an error: the scheduler serves
// every task, and one task's bug must not stop the others'.
func (t *scheduledTask) construct(slot time.Time) (args JobArgs, opts *InsertOpts, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("Construct panicked: %v", v)
		}
	}()
	args, opts = t.Construct(slot)
	return args, opts, nil
}

func isNilArgs(args JobArgs) bool {
	if args == nil {
		return true
	}
	v := reflect.ValueOf(args)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// recurringEntry is one task of a recurringSet; id tells a task added
// again under the same name from the one removed.
type recurringEntry struct {
	id   uint64
	task RecurringTask
}

// recurringSet is the tasks a runtime schedules: Config.Recurring, then
// what AddRecurring and RemoveRecurring change, even while it runs.
type recurringSet struct {
	mu      sync.Mutex
	entries []recurringEntry
	version uint64 // counts the changes, from 1
	// rowVersion is the version the worker's row in fila_workers lists.
	rowVersion uint64
	lastID     uint64
	// changed wakes the scheduler after a change; one pending wake is
	// enough, it reads the whole set.
	changed chan struct{}
}

func newRecurringSet(tasks []RecurringTask) *recurringSet {
	s := &recurringSet{version: 1, changed: make(chan struct{}, 1)}
	for _, t := range tasks {
		s.lastID++
		s.entries = append(s.entries, recurringEntry{id: s.lastID, task: t})
	}
	return s
}

// snapshot returns the set's version and a copy of its entries.
func (s *recurringSet) snapshot() (uint64, []recurringEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, slices.Clone(s.entries)
}

// names returns the names of the tasks, in order, and the set's version.
func (s *recurringSet) names() ([]string, uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, len(s.entries))
	for i, e := range s.entries {
		names[i] = e.task.Name
	}
	return names, s.version
}

// rowWritten records that the worker's row lists the tasks of version v.
func (s *recurringSet) rowWritten(v uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rowVersion = max(s.rowVersion, v)
}

// rowBehind says whether the worker's row lists an older set than version v.
func (s *recurringSet) rowBehind(v uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rowVersion < v
}

func (s *recurringSet) add(t RecurringTask) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if slices.ContainsFunc(s.entries, func(e recurringEntry) bool { return e.task.Name == t.Name }) {
		return fmt.Errorf("recurring task %q is scheduled already: remove it first to change it", t.Name)
	}
	s.lastID++
	s.entries = append(s.entries, recurringEntry{id: s.lastID, task: t})
	s.changedLocked()
	return nil
}

func (s *recurringSet) remove(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.entries, func(e recurringEntry) bool { return e.task.Name == name })
	if i < 0 {
		return false
	}
	s.entries = slices.Delete(s.entries, i, i+1)
	s.changedLocked()
	return true
}

func (s *recurringSet) changedLocked() {
	s.version++
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// AddRecurring schedules one more recurring task, before Run or while it
// runs: the scheduler takes it up at once, without a restart, and records
// it with this worker in fila_workers. A task that does not validate, or
// whose name this runtime schedules already, is refused with an error that
// says why; after Run returned, ErrClosed. The task's slots are one job
// each, as for Config.Recurring, however many workers schedule it.
func (r *Runtime) AddRecurring(t RecurringTask) error {
	if _, _, err := t.validate(); err != nil {
		return fmt.Errorf("add recurring task: %w", err)
	}
	select {
	case <-r.done:
		return ErrClosed
	default:
	}
	return r.recurring.add(t)
}

// RemoveRecurring stops scheduling the recurring task of that name, before
// Run or while it runs, and reports whether this runtime scheduled it. A
// slot being enqueued at that moment may still get its job; none after.
// The task stays in fila_recurring, with its jobs: another worker may
// schedule it, and if none does it is shown orphaned until
// DeleteRecurringTask forgets it.
func (r *Runtime) RemoveRecurring(name string) bool {
	return r.recurring.remove(name)
}

// RecurringNames returns the names of the recurring tasks this runtime
// schedules, in the order they were declared or added.
func (r *Runtime) RecurringNames() []string {
	names, _ := r.recurring.names()
	return names
}
