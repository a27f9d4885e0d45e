package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/stats"
	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

// queuePages converts pg_notification_queue_usage() (a share of the 8 GB
// queue) to 8 kB pages.
const queuePages = 8 << 30 / 8192

// NotifyPressure fills every handler slot of a runtime with slow jobs, then
// sends a burst of notifying inserts and of large notifications on its
// channel (about 10 MB, more than the socket buffers hold). The listener
// must never hold a transaction open nor stop reading its socket:
// pg_notification_queue_usage() stays within the few pages PostgreSQL
// keeps before it advances the queue's tail, and the listener's backend is
// never seen blocked writing to it (wait_event ClientWrite). The same burst
// with a listener that does not read its socket shows what that looks like,
// and that `fila stats` (internal/stats) reports it.
func NotifyPressure(ctx context.Context, env *Env, size Size) (*Result, error) {
	// The queue is one for the whole instance: measure on a server of our own.
	if err := env.need(true, false, false); err != nil {
		return nil, err
	}
	const (
		slots   = 2
		bigSize = 7000 // bytes per large notification (the limit is 8000)
		bigs    = 1500
	)
	res := &Result{Lost: NA, Duplicated: NA, Overlapping: NA,
		Load: fmt.Sprintf("inserts + %d × %d kB notifications", bigs, bigSize/1000)}
	db, err := env.newDatabase(ctx, "notify")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	release := make(chan struct{})
	var releaseOnce sync.Once
	lr, err := startRuntime(ctx, runtime.Config{
		DSN: db.dsn, ListenDSN: db.direct, Concurrency: slots, Lease: 5 * time.Second,
		SafetyPoll: 10 * time.Minute,
		Logger:     env.logger().Named("notify"),
		Kinds: []runtime.Kind{{Name: "slow", Handler: func(ctx context.Context, j *runtime.Job) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}}},
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		releaseOnce.Do(func() { close(release) })
		_ = lr.stop(10 * time.Second)
	}()
	for range slots {
		if _, err := runtime.Insert(ctx, db.pool, "slow", nil, nil); err != nil {
			return nil, err
		}
	}
	if !waitFor(ctx, 30*time.Second, func() bool { return lr.rt.Stats().Running == slots }) {
		return nil, fmt.Errorf("the slow jobs did not fill the %d slots within 30s", slots)
	}
	ch := "fila_default"

	burst := func(label string) (pressure, error) {
		env.progress("burst of notifications (%s)", label)
		s := startPressureSampler(db)
		var inserts atomic.Int64
		var failed atomic.Value
		bctx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for range 2 { // notifying inserts, one job per transaction
			wg.Add(1)
			go func() {
				defer wg.Done()
				for bctx.Err() == nil {
					if _, err := runtime.Insert(bctx, db.pool, "slow", nil, nil); err != nil {
						if bctx.Err() == nil {
							failed.Store(err)
						}
						return
					}
					inserts.Add(1)
				}
			}()
		}
		payload := strings.Repeat("x", bigSize)
		started := time.Now()
		var err error
		for i := 0; i < bigs && err == nil; i++ {
			_, err = db.pool.Exec(ctx, "SELECT pg_notify($1::text, $2::text)", ch, payload)
		}
		took := time.Since(started)
		stop()
		wg.Wait()
		p := s.stop()
		p.inserts, p.took = inserts.Load(), took
		if err == nil {
			if e, ok := failed.Load().(error); ok {
				err = e
			}
		}
		return p, err
	}

	fila, err := burst("Fila's listener only")
	if err != nil {
		return nil, fmt.Errorf("burst: %w", err)
	}
	res.check(lr.rt.Stats().Running == slots, "the slow handlers did not keep every slot busy during the burst")
	res.check(lr.failed() == nil, "the runtime stopped: %v", lr.failed())
	usage := func() float64 {
		var u float64
		_ = db.pool.QueryRow(ctx, "SELECT pg_notification_queue_usage()").Scan(&u)
		return u * queuePages
	}
	var after float64
	res.check(waitFor(ctx, 10*time.Second, func() bool { after = usage(); return after <= 8 }),
		"the notification queue still held %.0f pages 10s after the burst with only Fila listening", after)
	res.check(fila.listenerInTx == 0, "the listener was seen inside a transaction %d times", fila.listenerInTx)
	res.check(fila.listenerBlocked == 0, "the listener's backend was seen blocked writing to it (not read) %d times", fila.listenerBlocked)
	res.check(fila.listenerSamples > 0, "the listener's backend was never sampled")
	res.note("with every slot busy, %d notifying inserts and %d × %d B notifications in %.1fs: notification queue at most %.0f pages of 8 kB (%.4f%%), back to %.0f after the burst; listener never in a transaction, never blocked writing to its socket (%d samples)",
		fila.inserts, bigs, bigSize, fila.took.Seconds(), fila.maxPages, fila.maxUsage*100, after, fila.listenerSamples)

	// The same burst with a listener that never reads its socket.
	stuck, err := pgx.Connect(ctx, db.direct)
	if err != nil {
		return nil, err
	}
	defer stuck.Close(context.WithoutCancel(ctx))
	if _, err := stuck.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
		return nil, err
	}
	control, err := burst("plus a listener that does not read")
	if err != nil {
		return nil, fmt.Errorf("control burst: %w", err)
	}
	snap, err := stats.Collect(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	// What the stuck session holds is judged after the burst, against what
	// Fila left: while a burst runs, a loaded machine can leave Fila's own
	// listener a couple of megabytes behind (270 pages against the stuck
	// session's 897, in a run beside the package's other scenarios), which
	// says nothing of whether the sampler sees a session that never reads.
	held := snap.NotificationQueueUsage * queuePages
	res.check(control.blockedOthers > 0 && held > 4*max(after, 8) && control.maxPages > fila.maxPages,
		"a listener that does not read held the queue back to %.0f pages after the burst and %.0f at most during it (Fila alone: %.0f after, %.0f at most): the measure is blind",
		held, control.maxPages, after, fila.maxPages)
	res.check(snap.NotificationQueueUsage > 0, "fila stats reports a notification queue usage of %g while a listener holds it back", snap.NotificationQueueUsage)
	res.note("the same burst with a session that LISTENs and never reads: its backend blocked writing (%d samples), the queue grew to %.0f pages (%.4f%%) and stays there until it reads; fila stats then reported %.4f%%",
		control.blockedOthers, control.maxPages, control.maxUsage*100, snap.NotificationQueueUsage*100)
	releaseOnce.Do(func() { close(release) })
	return res, nil
}

// pressure is what a pressureSampler saw.
type pressure struct {
	maxUsage, maxPages float64
	listenerSamples    int
	listenerInTx       int // samples of the runtime's listener inside a transaction
	listenerBlocked    int // samples of it blocked writing to its client
	blockedOthers      int // samples of other sessions blocked writing to their client
	inserts            int64
	took               time.Duration
}

type pressureSampler struct {
	cancel context.CancelFunc
	done   chan pressure
}

func startPressureSampler(db *database) *pressureSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &pressureSampler{cancel: cancel, done: make(chan pressure, 1)}
	go func() {
		var p pressure
		defer func() { s.done <- p }()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			var usage float64
			if err := db.pool.QueryRow(ctx, "SELECT pg_notification_queue_usage()").Scan(&usage); err == nil {
				p.maxUsage = max(p.maxUsage, usage)
				p.maxPages = max(p.maxPages, usage*queuePages)
			}
			rows, err := db.pool.Query(ctx, `SELECT application_name = $2::text, coalesce(state, ''), coalesce(wait_event, '')
				FROM pg_stat_activity WHERE datname = $1::text AND backend_type = 'client backend'`, db.name, listener.ApplicationName)
			if err != nil {
				continue
			}
			for rows.Next() {
				var fila bool
				var state, wait string
				if rows.Scan(&fila, &state, &wait) != nil {
					continue
				}
				switch {
				case fila:
					p.listenerSamples++
					if strings.Contains(state, "transaction") {
						p.listenerInTx++
					}
					if wait == "ClientWrite" {
						p.listenerBlocked++
					}
				case wait == "ClientWrite":
					p.blockedOthers++
				}
			}
			rows.Close()
		}
	}()
	return s
}

func (s *pressureSampler) stop() pressure {
	s.cancel()
	return <-s.done
}
