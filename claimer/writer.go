package claimer

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Buffer is how many outcomes may wait to be written. Defaults to 4096.
	Buffer int
	// MaxBatch caps the outcomes written by one statement. Defaults to 1000.
	MaxBatch int
	// OnWritten, if set, is called after each write with how the database
	// left each job (its new state, or StateFenced).
	OnWritten func(finished []Finished)
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// Writer writes outcomes in batches, group-commit style: each write takes
// everything that queued up during the previous one, so a lone outcome is
// written at once and a burst shares one statement. It never drops an
// outcome while its context lives: a failed write is retried with backoff.
type Writer struct {
	store *Store
	cfg   WriterConfig
	in    chan Outcome
	log   *zap.Logger
}

// NewWriter returns a Writer on store.
func NewWriter(store *Store, cfg WriterConfig) *Writer {
	if cfg.Buffer <= 0 {
		cfg.Buffer = 4096
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 1000
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Writer{store: store, cfg: cfg, in: make(chan Outcome, cfg.Buffer), log: cfg.Logger.Named("writer")}
}

// Submit queues one outcome. It blocks while the buffer is full, which slows
// handlers down rather than losing results.
func (w *Writer) Submit(o Outcome) { w.in <- o }

// Close says no more outcomes will be submitted; Run returns once the
// remaining ones are written.
func (w *Writer) Close() { close(w.in) }

// Run writes outcomes until Close has been called and everything is written,
// or until ctx is cancelled (the outcomes still queued are then logged: their
// jobs come back when their leases expire).
func (w *Writer) Run(ctx context.Context) error {
	batch := make([]Outcome, 0, w.cfg.MaxBatch)
	for {
		batch = batch[:0]
		select {
		case o, ok := <-w.in:
			if !ok {
				return nil
			}
			batch = append(batch, o)
		case <-ctx.Done():
			w.abandon(nil)
			return nil
		}
	fill:
		for len(batch) < w.cfg.MaxBatch {
			select {
			case o, ok := <-w.in:
				if !ok {
					break fill
				}
				batch = append(batch, o)
			default:
				break fill
			}
		}
		if !w.write(ctx, batch) {
			w.abandon(batch)
			return nil
		}
	}
}

func (w *Writer) write(ctx context.Context, batch []Outcome) bool {
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval = 50 * time.Millisecond
	bo.MaxInterval = 2 * time.Second
	bo.MaxElapsedTime = 0
	for attempt := 1; ; attempt++ {
		fin, err := w.store.Finish(ctx, batch)
		if err == nil {
			done, again := fin[:0:0], batch[:0:0]
			for i, f := range fin {
				if f.State == StateSkipped {
					again = append(again, batch[i])
				} else {
					done = append(done, f)
				}
			}
			if w.cfg.OnWritten != nil && len(done) > 0 {
				w.cfg.OnWritten(done)
			}
			if len(again) == 0 {
				return true
			}
			// Rows a concurrent claim held for a moment: write them again
			// shortly instead of waiting on their locks.
			batch = again
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
				return false
			}
			continue
		}
		if ctx.Err() != nil {
			return false
		}
		wait := bo.NextBackOff()
		w.log.Error("write outcomes failed; will retry", zap.Int("outcomes", len(batch)),
			zap.Int("attempt", attempt), zap.Duration("retry_in", wait), zap.Error(err))
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return false
		}
	}
}

func (w *Writer) abandon(batch []Outcome) {
	n := len(batch)
drain:
	for {
		select {
		case _, ok := <-w.in:
			if !ok {
				break drain
			}
			n++
		default:
			break drain
		}
	}
	if n > 0 {
		w.log.Warn("outcomes not written before shutdown; their jobs run again after their leases expire",
			zap.Int("outcomes", n))
	}
}
