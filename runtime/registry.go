package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// registryTouchEvery is how often a worker refreshes its row in
// fila_workers while nothing changes: seldom, so an idle worker costs
// almost nothing, and often enough that `fila stats` can tell a live worker
// from a row left by a killed one.
const registryTouchEvery = 5 * time.Minute

// registryForgetAfter is how long a worker's row outlives its last refresh
// before any worker's maintenance deletes it.
const registryForgetAfter = time.Hour

const (
	sqlRegisterKinds = `INSERT INTO fila_kinds (queue, kind)
SELECT q, k FROM unnest($1::text[]) AS q CROSS JOIN unnest($2::text[]) AS k
ON CONFLICT (queue, kind) DO UPDATE SET last_seen_at = now()`

	sqlUpsertWorker = `INSERT INTO fila_workers (id, host, pid, queues, kinds, mode, wake_source, wake_error)
VALUES ($1::text, $2::text, $3::int, $4::text[], $5::text[], $6::text, $7::text, $8::text)
ON CONFLICT (id) DO UPDATE SET wake_source = EXCLUDED.wake_source, wake_error = EXCLUDED.wake_error,
    last_seen_at = now()`

	sqlForgetWorkers = `DELETE FROM fila_workers WHERE last_seen_at < now() - make_interval(secs => $1::float8)`

	sqlRemoveWorker = `DELETE FROM fila_workers WHERE id = $1::text`

	sqlForgetSleepers = `DELETE FROM fila_sleepers s WHERE NOT EXISTS (SELECT 1 FROM fila_workers w WHERE w.id = s.worker)`
)

// wakeState is how the worker's wake source is doing, as fila_workers
// records it: up, down (with the reason) or none (ModePoll).
type wakeState struct {
	state, err string
}

func (s wakeState) key() string { return s.state + "\x00" + s.err }

func (r *Runtime) wakeState() wakeState {
	r.ctlMu.Lock()
	src := r.source
	r.ctlMu.Unlock()
	switch {
	case src == nil:
		return wakeState{state: "none"}
	case src.Healthy():
		return wakeState{state: "up"}
	}
	reason := src.Stats().LastError
	if reason == "" {
		reason = "not connected yet"
	}
	return wakeState{state: "down", err: reason}
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
	if _, err := g.rt.control.Exec(ctx, sqlRegisterKinds, g.rt.cfg.Queues, g.rt.kindNames); err != nil {
		return fmt.Errorf("register kinds: %w", err)
	}
	return nil
}

func (g *registry) register(ctx context.Context, st wakeState) { g.update(ctx, st) }

// update writes the worker's row with its wake source's state.
func (g *registry) update(ctx context.Context, st wakeState) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	var wakeErr *string
	if st.err != "" {
		wakeErr = &st.err
	}
	if _, err := g.rt.control.Exec(ctx, sqlUpsertWorker, g.id, g.host, g.pid, g.rt.cfg.Queues, g.rt.kindNames,
		string(g.rt.cfg.Mode), st.state, wakeErr); err != nil {
		g.log.Warn("cannot write this worker's row in fila_workers", zap.Error(err))
	}
}

// touch refreshes the worker's row and forgets workers gone for long.
func (g *registry) touch(ctx context.Context) {
	g.update(ctx, g.rt.wakeState())
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := g.rt.control.Exec(ctx, sqlForgetWorkers, registryForgetAfter.Seconds()); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot forget workers gone from fila_workers", zap.Error(err))
	}
	if _, err := g.rt.control.Exec(ctx, sqlMinutesForget, minutesKeep.Seconds()); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot delete old rows of fila_minutes", zap.Error(err))
	}
	// A worker that died asleep leaves its rows: producers notify for
	// nobody until they are gone, which costs time but loses nothing.
	if _, err := g.rt.control.Exec(ctx, sqlForgetSleepers); err != nil && ctx.Err() == nil {
		g.log.Warn("cannot forget the sleeping rows of workers gone", zap.Error(err))
	}
}

// remove deletes the worker's row at a clean stop.
func (g *registry) remove() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := g.rt.control.Exec(ctx, sqlRemoveWorker, g.id); err != nil {
		g.log.Warn("cannot remove this worker's row from fila_workers", zap.Error(err))
	}
}
