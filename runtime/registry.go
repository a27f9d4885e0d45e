package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	mathrand "math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// registryTouchEvery is how often a worker's maintenance forgets the rows
// of workers gone for long, with their sleeping rows and old per-minute
// counts. Its own row it refreshes every Config.LivenessInterval
// (aliveLoop).
const registryTouchEvery = 5 * time.Minute

// registryForgetAfter is how long a worker's row outlives its last refresh
// before any worker's maintenance deletes it.
const registryForgetAfter = time.Hour

const (
	sqlRegisterKinds = `INSERT INTO fila_kinds (queue, kind)
SELECT q, k FROM unnest($1::text[]) AS q CROSS JOIN unnest($2::text[]) AS k
ON CONFLICT (queue, kind) DO UPDATE SET last_seen_at = now()`

	sqlUpsertWorker = `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, wake_error, degraded,
    liveness_interval, recurring)
VALUES ($1::text, $2::text, $3::int, $4::text[], $5::text[], $6::text, $7::text, $8::text, $9::text,
    make_interval(secs => $10::float8), $11::text[])
ON CONFLICT (id) DO UPDATE SET wake_source = EXCLUDED.wake_source, wake_error = EXCLUDED.wake_error,
    degraded = EXCLUDED.degraded, recurring = EXCLUDED.recurring, last_seen_at = now()`

	// The liveness heartbeat: false when the row is gone.
	sqlWorkerSeen = `SELECT fila_worker_seen($1::text)`

	sqlForgetWorkers = `DELETE FROM fila_workers WHERE last_seen_at < now() - make_interval(secs => $1::float8)`

	sqlRemoveWorker = `DELETE FROM fila_workers WHERE id = $1::text`

	sqlForgetSleepers = `DELETE FROM fila_sleepers s WHERE NOT EXISTS (SELECT 1 FROM fila_workers w WHERE w.id = s.worker)`
)

// wakeState is how the worker is doing, as fila_workers records it: its
// wake source up, down (with the reason) or none (ModePoll), and what runs
// degraded (see Runtime.degraded).
type wakeState struct {
	state, err, degraded string
}

func (s wakeState) key() string { return s.state + "\x00" + s.err + "\x00" + s.degraded }

func (r *Runtime) wakeState() wakeState {
	r.ctlMu.Lock()
	src := r.source
	r.ctlMu.Unlock()
	degraded := r.degraded()
	switch {
	case src == nil:
		return wakeState{state: "none", degraded: degraded}
	case src.Healthy():
		return wakeState{state: "up", degraded: degraded}
	}
	reason := src.Stats().LastError
	if reason == "" {
		reason = "not connected yet"
	}
	return wakeState{state: "down", err: reason, degraded: degraded}
}

// degraded says what this worker does less of than configured, and why: the
// claims and outcome statements that timeouts made smaller. "" when none.
func (r *Runtime) degraded() string {
	var parts []string
	for _, p := range r.producerList() {
		if n := int(p.batchCap.Load()); n < r.cfg.ClaimBatch {
			parts = append(parts, fmt.Sprintf("claims on queue %s take at most %d jobs (ClaimBatch %d) after timeouts", p.queue, n, r.cfg.ClaimBatch))
		}
	}
	if c := r.completer; c != nil {
		if n := c.writer.BatchCap(); n < r.cfg.ClaimBatch {
			parts = append(parts, fmt.Sprintf("outcome statements write at most %d jobs (of %d) after timeouts", n, r.cfg.ClaimBatch))
		}
	}
	return strings.Join(parts, "; ")
}

// registry keeps this worker's row in fila_workers and its kinds in
// fila_kinds, so operators (and `fila enqueue`'s kind check) see what each
// worker serves and whether its wake source works. Failing to write it never
// stops the worker.
type registry struct {
	rt   *Runtime
	log  *zap.Logger
	id   string
	host string
	pid  int

	writeMu sync.Mutex // see write
}

func newRegistry(rt *Runtime) *registry {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	pid := os.Getpid()
	return &registry{rt: rt, log: rt.log.Named("registry"), host: host, pid: pid,
		id: fmt.Sprintf("%s/%s/%s", host, strconv.Itoa(pid), hex.EncodeToString(b[:]))}
}

// registerKinds records every (queue, kind) this worker handles.
func (g *registry) registerKinds(ctx context.Context) error {
	if _, err := g.rt.store.Exec(ctx, sqlRegisterKinds, g.rt.Queues(), g.rt.kindNames); err != nil {
		return fmt.Errorf("register kinds: %w", err)
	}
	return nil
}

func (g *registry) register(ctx context.Context, st wakeState) { g.update(ctx, st) }

// update writes the worker's row with its wake source's state.
func (g *registry) update(ctx context.Context, st wakeState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := g.write(ctx, st); err != nil {
		g.log.Warn("cannot write this worker's row in fila_workers", zap.Error(err))
	}
}

// write inserts or updates the worker's whole row.
func (g *registry) write(ctx context.Context, st wakeState) error {
	var wakeErr, degraded *string
	if st.err != "" {
		wakeErr = &st.err
	}
	if st.degraded != "" {
		degraded = &st.degraded
	}
	// One write at a time: a row written from an older set of recurring
	// tasks must not land after a newer one.
	g.writeMu.Lock()
	defer g.writeMu.Unlock()
	recurring, version := g.rt.recurring.names()
	_, err := g.rt.store.Exec(ctx, sqlUpsertWorker, g.id, g.host, g.pid, g.rt.Queues(), g.rt.kindNames,
		string(g.rt.cfg.Mode), st.state, wakeErr, degraded, g.rt.cfg.LivenessInterval.Seconds(), recurring)
	if err == nil {
		g.rt.recurring.rowWritten(version)
	}
	return err
}

// aliveLoop refreshes the worker's row every LivenessInterval until ctx
// ends, so that every view can tell within seconds a live worker from one
// that died without a clean stop. Each beat is one UPDATE of one row,
// committed without waiting for the WAL flush (fila_worker_seen); a row
// found gone (forgotten by another worker's maintenance after a long
// absence, or deleted by hand) is written whole again. Beats come a little
// early rather than late, at random within the last tenth of the interval,
// so that workers started together do not beat together.
func (g *registry) aliveLoop(ctx context.Context) {
	every := g.rt.cfg.LivenessInterval
	failing := false
	for {
		wait := every - time.Duration(mathrand.Int64N(int64(every/10)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := g.beat(ctx, every)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil && !failing:
			failing = true
			g.log.Warn("cannot refresh this worker's row in fila_workers: it counts as gone once three refreshes are missed",
				zap.Duration("liveness_interval", every), zap.Error(err))
		case err == nil && failing:
			failing = false
			g.log.Info("this worker's row in fila_workers is refreshed again")
		}
	}
}

// beat refreshes the row once, within one interval.
func (g *registry) beat(ctx context.Context, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var found bool
	if err := g.rt.store.QueryRow(ctx, sqlWorkerSeen, []any{g.id}, &found); err != nil {
		return err
	}
	if found {
		return nil
	}
	return g.write(ctx, g.rt.wakeState())
}

// touch forgets workers gone for long, their sleeping rows, and old
// per-minute counts.
func (g *registry) touch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := g.rt.store.Exec(ctx, sqlForgetWorkers, registryForgetAfter.Seconds()); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot forget workers gone from fila_workers", zap.Error(err))
	}
	if _, err := g.rt.store.Exec(ctx, sqlMinutesForget, minutesKeep.Seconds()); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot delete old rows of fila_minutes", zap.Error(err))
	}
	// A worker that died asleep leaves its rows: producers notify for
	// nobody until they are gone, which costs time but loses nothing.
	if _, err := g.rt.store.Exec(ctx, sqlForgetSleepers); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot forget the sleeping rows of workers gone", zap.Error(err))
	}
}

// remove deletes the worker's row at a clean stop, within ctx.
func (g *registry) remove(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := g.rt.store.Exec(ctx, sqlRemoveWorker, g.id); err != nil {
		g.log.Warn("cannot remove this worker's row from fila_workers", zap.Error(err))
	}
}
