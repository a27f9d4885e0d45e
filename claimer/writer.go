package claimer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// Limits and defaults of WriterConfig.
const (
	WriterBufferDefault   = 4096
	WriterMaxBatchDefault = 1000
	// WriteTimeoutDefault bounds one outcome statement.
	WriteTimeoutDefault = 10 * time.Second
	// skippedRetryMin and skippedRetryMax bound the backoff of an outcome
	// whose row a concurrent statement held: it is written again soon, but
	// a row held for long cannot make the writer spin.
	skippedRetryMin = time.Millisecond
	skippedRetryMax = time.Second
)

// ErrWriterStopped is returned by Submit once the writer no longer writes.
var ErrWriterStopped = errors.New("outcome writer stopped")

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Buffer is how many outcomes may wait to be written. Defaults to
	// WriterBufferDefault.
	Buffer int
	// MaxBatch caps the outcomes written by one statement. Defaults to
	// WriterMaxBatchDefault.
	MaxBatch int
	// WriteTimeout bounds each statement. Defaults to WriteTimeoutDefault.
	WriteTimeout time.Duration
	// OnWritten, if set, is called after each write with how the database
	// left each attempt (its new state, or StateFenced). It is called from
	// the writer's goroutine and must not block for long.
	OnWritten func(finished []Finished)
	// OnBatchCap, if set, is called when timeouts make the writer write
	// fewer outcomes per statement than MaxBatch, or when it writes more
	// again, with the new cap.
	OnBatchCap func(cap int)
	// OnAbandoned, if set, is called with outcomes the writer gives up on:
	// the database refused them even with a placeholder error text, or the
	// writer was stopped before it could write them. Their attempts stay
	// running until their leases expire; then they run again.
	OnAbandoned func(outs []Outcome, err error)
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Writer writes outcomes in batches, group-commit style: each write takes
// everything that queued up during the previous one, so a lone outcome is
// written at once and a burst shares one statement.
//
// One outcome never holds back the others: a batch the database refuses as
// data (SQLSTATE class 22) is split until the refused outcome is alone, and
// that one is written with a placeholder error text; an outcome whose row
// was locked for a moment is retried later with capped backoff while the
// following batches go ahead. A batch that fails otherwise (the database is
// unreachable) is retried with backoff, since every outcome would fail the
// same way.
//
// It writes one statement at a time: while it runs, the next batch gathers,
// so a single writer keeps up by writing more per statement. Two writers
// made outcome statements contend for the same index pages and, on two
// cores, for the processor: a drain of 50 000 no-op jobs ran at 28 100
// jobs/s with one and 23 900 with two (mean of three interleaved runs each
// of fila bench --scenarios drain --drain-jobs 50000; 21 100 against 19 200
// at 20 000 jobs).
type Writer struct {
	store *Store
	cfg   WriterConfig
	log   *zap.Logger

	in      chan Outcome
	stopped chan struct{} // closed when Run returns
	stop    sync.Once

	// batchCap is the most outcomes one statement writes: MaxBatch, halved
	// after a statement that ran out of time, doubled back after
	// writesBeforeGrow statements in a row that did not.
	batchCap  atomic.Int32
	goodWrite atomic.Int32
}

// writesBeforeGrow is how many statements in a row must finish in time
// before a batch cut short by timeouts grows again.
const writesBeforeGrow = 20

// BatchCap is the most outcomes one statement writes now.
func (w *Writer) BatchCap() int { return int(w.batchCap.Load()) }

// ranOutOfTime lowers the batch cap below n, the size of a batch whose
// statement timed out.
func (w *Writer) ranOutOfTime(n int, err error) {
	w.goodWrite.Store(0)
	half := max(n/2, 1)
	for {
		old := w.batchCap.Load()
		if int(old) <= half {
			return
		}
		if w.batchCap.CompareAndSwap(old, int32(half)) {
			break
		}
	}
	w.log.Warn("outcome statement ran out of time; writing fewer outcomes per statement",
		zap.Int("outcomes_per_statement", half), zap.Int("batch", n), zap.Error(err))
	if w.cfg.OnBatchCap != nil {
		w.cfg.OnBatchCap(half)
	}
}

// inTime counts a statement that finished in time, and doubles a cap cut
// by timeouts after writesBeforeGrow of them.
func (w *Writer) inTime() {
	old := int(w.batchCap.Load())
	if old >= w.cfg.MaxBatch || w.goodWrite.Add(1) < writesBeforeGrow {
		return
	}
	w.goodWrite.Store(0)
	grown := min(2*old, w.cfg.MaxBatch)
	if w.batchCap.CompareAndSwap(int32(old), int32(grown)) {
		w.log.Info("outcome statements finish in time again; writing more outcomes per statement",
			zap.Int("outcomes_per_statement", grown))
		if w.cfg.OnBatchCap != nil {
			w.cfg.OnBatchCap(grown)
		}
	}
}

// NewWriter returns a Writer on store.
func NewWriter(store *Store, cfg WriterConfig) *Writer {
	if cfg.Buffer <= 0 {
		cfg.Buffer = WriterBufferDefault
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = WriterMaxBatchDefault
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = WriteTimeoutDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	w := &Writer{store: store, cfg: cfg, log: cfg.Logger.Named("writer"),
		in: make(chan Outcome, cfg.Buffer), stopped: make(chan struct{})}
	w.batchCap.Store(int32(cfg.MaxBatch))
	return w
}

// Submit queues one outcome. It blocks while the buffer is full, which slows
// handlers down rather than losing results, and returns ErrWriterStopped once
// Run has returned. Submit must not be called after Close.
func (w *Writer) Submit(o Outcome) error {
	select {
	case <-w.stopped:
		return ErrWriterStopped
	default:
	}
	// A send with room in the buffer, the common case, costs no select
	// over two channels (2.6% of a 200 000-job drain's CPU samples).
	select {
	case w.in <- o:
		return nil
	default:
	}
	select {
	case w.in <- o:
		return nil
	case <-w.stopped:
		return ErrWriterStopped
	}
}

// Close says no more outcomes will be submitted; Run returns once the
// remaining ones are written.
func (w *Writer) Close() { close(w.in) }

// Stopped is closed when Run has returned.
func (w *Writer) Stopped() <-chan struct{} { return w.stopped }

// retry is an outcome whose row was locked: written again at due.
type retry struct {
	out  Outcome
	due  time.Time
	wait time.Duration
}

// Run writes outcomes until Close has been called and everything is written,
// or until ctx is cancelled (outcomes still queued are then abandoned: their
// jobs come back when their leases expire).
func (w *Writer) Run(ctx context.Context) error {
	defer w.stop.Do(func() { close(w.stopped) })
	w.run(ctx)
	return nil
}

// run is Run's loop: each statement takes the outcomes that queued up while
// the one before it ran.
func (w *Writer) run(ctx context.Context) {
	in := (<-chan Outcome)(w.in) // nil once closed: a nil channel never delivers
	var later []retry            // outcomes whose rows were locked, by due time
	// One batch buffer for every write: nothing keeps a batch once its
	// write returns (skipped outcomes are copied into later), and a fresh
	// one grown to a thousand outcomes for each write was a tenth of a
	// drain's allocated bytes.
	var buf []Outcome
	for {
		if in == nil && len(later) == 0 {
			return
		}
		var retryDue <-chan time.Time
		if len(later) > 0 {
			retryDue = time.After(time.Until(later[0].due))
		}
		clear(buf) // so the last batch's outputs and error texts can be freed
		batch := buf[:0]
		select {
		case o, ok := <-in:
			if !ok {
				in = nil
				continue
			}
			batch = append(batch, o)
		case <-retryDue:
		case <-ctx.Done():
			w.abandonAll(in, later, ctx.Err())
			return
		}
		// Take everything else that is waiting, up to the batch size.
		limit := w.BatchCap()
	fill:
		for len(batch) < limit && in != nil {
			select {
			case o, ok := <-in:
				if !ok {
					in = nil
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		// And the retries that are due.
		waited := map[AttemptKey]time.Duration{}
		now := time.Now()
		for len(later) > 0 && !later[0].due.After(now) && len(batch) < limit {
			batch = append(batch, later[0].out)
			waited[later[0].out.Key()] = later[0].wait
			later = later[1:]
		}
		buf = batch
		if len(batch) == 0 {
			continue
		}
		skipped, ok := w.write(ctx, batch)
		if !ok {
			w.abandonAll(in, later, ctx.Err())
			return
		}
		for _, o := range skipped {
			wait := skippedRetryMin
			if prev, seen := waited[o.Key()]; seen {
				wait = min(2*prev, skippedRetryMax)
			}
			later = insertByDue(later, retry{out: o, due: time.Now().Add(wait), wait: wait})
		}
	}
}

// insertByDue keeps later sorted by due time.
func insertByDue(later []retry, r retry) []retry {
	i := len(later)
	for i > 0 && later[i-1].due.After(r.due) {
		i--
	}
	later = append(later, retry{})
	copy(later[i+1:], later[i:])
	later[i] = r
	return later
}

// write writes batch and returns the outcomes to write again because their
// rows were locked. It returns ok false only when ctx ended first.
func (w *Writer) write(ctx context.Context, batch []Outcome) (skipped []Outcome, ok bool) {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0
	bo.Reset() // the constructor started from its own 500 ms; start from InitialInterval
	for attempt := 1; ; attempt++ {
		fin, err := w.finish(ctx, batch)
		switch {
		case err == nil:
			w.inTime()
			return w.report(batch, fin), true
		case IsDataError(err):
			return w.split(ctx, batch, err)
		case ctx.Err() == nil && IsTimeout(err) && len(batch) > 1:
			// Sent again whole it would time out again: in halves, and
			// smaller batches from now on.
			w.ranOutOfTime(len(batch), err)
			return w.splitRetrying(ctx, batch)
		case IsUniqueViolation(err) && len(batch) > 1:
			// One outcome's job raced another for its unique key: write the
			// others without it, and it alone again (below, with backoff),
			// when the statement finds the key's holder.
			return w.splitRetrying(ctx, batch)
		case ctx.Err() != nil:
			w.abandon(batch, ctx.Err())
			return nil, false
		}
		wait := bo.NextBackOff()
		w.log.Error("write outcomes failed; will retry", zap.Int("outcomes", len(batch)),
			zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			w.abandon(batch, ctx.Err())
			return nil, false
		}
	}
}

// split writes a batch the database refused as data in halves, so the
// outcomes it can store are written and the one it cannot is found alone.
func (w *Writer) split(ctx context.Context, batch []Outcome, cause error) (skipped []Outcome, ok bool) {
	if len(batch) == 1 {
		return w.writeAlone(ctx, batch[0], cause)
	}
	mid := len(batch) / 2
	for _, half := range [][]Outcome{batch[:mid], batch[mid:]} {
		s, ok := w.write(ctx, half)
		skipped = append(skipped, s...)
		if !ok {
			return skipped, false
		}
	}
	return skipped, true
}

// splitRetrying writes batch in halves, each retried as write does.
func (w *Writer) splitRetrying(ctx context.Context, batch []Outcome) (skipped []Outcome, ok bool) {
	mid := len(batch) / 2
	for _, half := range [][]Outcome{batch[:mid], batch[mid:]} {
		s, ok := w.write(ctx, half)
		skipped = append(skipped, s...)
		if !ok {
			return skipped, false
		}
	}
	return skipped, true
}

// writeAlone writes one outcome the database refused as data, with a
// placeholder instead of its error text; if even that is refused, the
// outcome is abandoned and its job runs again after its lease.
func (w *Writer) writeAlone(ctx context.Context, o Outcome, cause error) (skipped []Outcome, ok bool) {
	w.log.Error("the database refused an outcome; writing it with a placeholder error text",
		zap.Int64("job_id", o.ID), zap.Int("attempt", o.Attempt.Attempt), zap.Error(cause))
	safe := o
	// The placeholder names the refusal without repeating the refused text.
	code := "unknown"
	var pgErr *pgconn.PgError
	if errors.As(cause, &pgErr) {
		code = pgErr.Code
	}
	safe.Err = fmt.Sprintf("the attempt's error text could not be stored (the database refused it with SQLSTATE %s; see the worker's log)", code)
	if o.OK {
		// Nothing of a success is text: the refusal is elsewhere (a delay out
		// of range, say). Record it as a failure rather than lose it.
		safe.OK = false
	}
	safe.Delay = min(max(safe.Delay, 0), time.Hour)
	fin, err := w.finish(ctx, []Outcome{safe})
	if err == nil {
		return w.report([]Outcome{safe}, fin), true
	}
	if ctx.Err() != nil {
		w.abandon([]Outcome{o}, ctx.Err())
		return nil, false
	}
	w.abandon([]Outcome{o}, err)
	return nil, true
}

func (w *Writer) finish(ctx context.Context, batch []Outcome) ([]Finished, error) {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	return w.store.Finish(sctx, batch)
}

// report passes written outcomes on and returns those to write again.
func (w *Writer) report(batch []Outcome, fin []Finished) (skipped []Outcome) {
	// Rows found locked are rare: the outcomes are looked up by key only
	// when there are some.
	var byKey map[AttemptKey]Outcome
	done := fin[:0:0]
	for _, f := range fin {
		if f.State == StateSkipped {
			if byKey == nil {
				byKey = make(map[AttemptKey]Outcome, len(batch))
				for _, o := range batch {
					byKey[o.Key()] = o
				}
			}
			skipped = append(skipped, byKey[f.Key])
			continue
		}
		done = append(done, f)
	}
	if w.cfg.OnWritten != nil && len(done) > 0 {
		w.cfg.OnWritten(done)
	}
	return skipped
}

func (w *Writer) abandon(outs []Outcome, err error) {
	if len(outs) == 0 {
		return
	}
	w.log.Warn("outcomes not written; their jobs run again after their leases expire",
		zap.Int("outcomes", len(outs)), zap.Error(err))
	if w.cfg.OnAbandoned != nil {
		w.cfg.OnAbandoned(outs, err)
	}
}

// abandonAll abandons the retries and whatever is still queued.
func (w *Writer) abandonAll(in <-chan Outcome, later []retry, err error) {
	var outs []Outcome
	for _, r := range later {
		outs = append(outs, r.out)
	}
drain:
	for in != nil {
		select {
		case o, ok := <-in:
			if !ok {
				break drain
			}
			outs = append(outs, o)
		default:
			break drain
		}
	}
	w.abandon(outs, err)
}
