package suite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/bench"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// The breakdown scenario says where one pickup's time goes at a low rate,
// where every job is alone: for Fila's notify mode and for the floor, each
// job's interval from just before its COMMIT to its pickup is cut into
// steps, read on the same clock as the latency:
//
//  1. notification: COMMIT sent → the notification read by a LISTEN
//     connection (for Fila, a bare one LISTENing beside the worker's
//     listener on the same channel: the worker's own is inside the runtime);
//  2. wake-up: notification read → the worker's producer woken
//     (Observer.Woken), Fila's listener and its hand-off (Fila only);
//  3. to claim sent: woken (the floor: notification read) → the claim
//     handed to pgx (for Fila including the pool's acquire);
//  4. claim round trip: the claim handed to pgx → its reply read, server
//     execution included (a bare SELECT 1 round trip on the same pool is
//     measured after the run for scale);
//  5. to handler: claim reply read → the handler's first line (the floor
//     has no handler: its pickup is the reply).
//
// Only jobs claimed by a claim that names them (Fila's claim by id) or, for
// the floor, by the claim that followed their own notification, are
// broken down; the rest are counted as not traced.

// BreakdownRateDefault is the breakdown scenario's insert rate: low enough
// that each pickup is alone.
const BreakdownRateDefault = 10

// Step names of a breakdown, in order.
const (
	StepNotification = "COMMIT → notification at a LISTEN connection"
	StepWake         = "notification → worker woken"
	StepToClaim      = "woken → claim sent"
	StepClaim        = "claim round trip (sent → reply read)"
	StepToHandler    = "claim reply → handler's first line"
)

// bareRoundTrips is how many SELECT 1 round trips give the pool's bare
// round trip after a run.
const bareRoundTrips = 200

func (s *suite) breakdown(ctx context.Context) error {
	rate := BreakdownRateDefault
	fila, err := s.breakdownFila(ctx, rate)
	if err != nil {
		return fmt.Errorf("fila: %w", err)
	}
	floor, err := s.breakdownFloor(ctx, rate)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	s.res.Breakdown = append(s.res.Breakdown, fila, floor)
	return nil
}

// jobSteps are the instants of one job's pickup; zero when not seen.
type jobSteps struct {
	notified, woken, sent, replied time.Time
}

// claimTracer is a pgx tracer that records, for each claim by id, when it
// was handed to pgx and when its reply was read, and keeps the times of
// the pool's acquires out of it.
type claimTracer struct {
	mu     sync.Mutex
	claims map[int64]jobSteps
}

type claimKey struct{}

func (t *claimTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	// The call of fila_claim_id, or its statement sent directly, which
	// names it in a comment.
	if !strings.Contains(d.SQL, "fila_claim_id") {
		return ctx
	}
	for _, a := range d.Args {
		if id, ok := a.(int64); ok {
			return context.WithValue(ctx, claimKey{}, claimStart{id: id, at: time.Now()})
		}
	}
	return ctx
}

type claimStart struct {
	id int64
	at time.Time
}

func (t *claimTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	cs, ok := ctx.Value(claimKey{}).(claimStart)
	if !ok || d.Err != nil {
		return
	}
	now := time.Now()
	t.mu.Lock()
	t.claims[cs.id] = jobSteps{sent: cs.at, replied: now}
	t.mu.Unlock()
}

// wakeObserver records when producers were woken by a notification.
type wakeObserver struct {
	mu    sync.Mutex
	wakes []time.Time
}

func (o *wakeObserver) Woken(_ string, reason runtime.WakeReason) {
	if reason != runtime.WakeNotify {
		return
	}
	now := time.Now()
	o.mu.Lock()
	o.wakes = append(o.wakes, now)
	o.mu.Unlock()
}
func (o *wakeObserver) Claimed(string, []*runtime.Job, int)                   {}
func (o *wakeObserver) Finished(*runtime.Job, runtime.Outcome, time.Duration) {}

// lastBefore returns the last of sorted times at or before t and after
// after, if any.
func lastBefore(sorted []time.Time, after, t time.Time) (time.Time, bool) {
	i, _ := slices.BinarySearchFunc(sorted, t, func(a, b time.Time) int { return a.Compare(b) })
	// sorted[i-1] < t (or == when found at i)
	if i < len(sorted) && sorted[i].Equal(t) {
		i++
	}
	if i == 0 || !sorted[i-1].After(after) {
		return time.Time{}, false
	}
	return sorted[i-1], true
}

// breakdownFila runs Fila's notify mode at rate with a traced pool, an
// observer of wake-ups and a bare LISTEN beside it.
func (s *suite) breakdownFila(ctx context.Context, rate int) (res bench.BreakdownResult, err error) {
	db, err := s.srv.fresh(ctx)
	if err != nil {
		return res, err
	}
	defer func() { err = errors.Join(err, db.drop()) }()

	// The bare listener: the notification's arrival at a client, as the
	// worker's own listener would see it.
	conn, err := listenConn(ctx, db.dsn, floorQueue)
	if err != nil {
		return res, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var nmu sync.Mutex
	notified := map[int64]time.Time{}
	lctx, stopListening := context.WithCancel(ctx)
	listenErr := make(chan error, 1)
	go func() {
		listenErr <- floorLoop(lctx, conn, nil, func(id int64, at time.Time) {
			nmu.Lock()
			if _, seen := notified[id]; !seen {
				notified[id] = at
			}
			nmu.Unlock()
		})
	}()
	defer func() {
		stopListening()
		if lerr := <-listenErr; lerr != nil && !errors.Is(lerr, context.Canceled) {
			err = errors.Join(err, lerr)
		}
	}()

	tracer := &claimTracer{claims: map[int64]jobSteps{}}
	obs := &wakeObserver{}
	pc, err := pgconfig.Pool(db.dsn)
	if err != nil {
		return res, err
	}
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	rec := newRecorder(s.jobsFor(rate))
	cfg := runtimeConfig(ModeNotify, db.dsn, s.log, func(_ context.Context, job *runtime.Job) error {
		rec.pickedUp(job.ID, time.Now())
		return nil
	})
	// The runtime's own statements go to a control pool it builds from this
	// pool's configuration, tracer included.
	cfg.Pool, cfg.Observer = pool, obs
	rt, err := runtime.New(cfg)
	if err != nil {
		return res, err
	}
	stop, err := started(ctx, rt)
	if err != nil {
		return res, err
	}
	lat, err := s.measure(ctx, db, rec, SystemFila, ModeNotify, rate, ScenarioBreakdown)
	err = errors.Join(err, stop())
	if err != nil {
		return res, err
	}

	obs.mu.Lock()
	wakes := slices.Clone(obs.wakes)
	obs.mu.Unlock()
	slices.SortFunc(wakes, func(a, b time.Time) int { return a.Compare(b) })
	tracer.mu.Lock()
	defer tracer.mu.Unlock()
	nmu.Lock()
	defer nmu.Unlock()
	steps := map[string][]float64{}
	var totals []float64
	traced := 0
	for id, c := range tracer.claims {
		t0, t1, ok := rec.times(id)
		n, nok := notified[id]
		if !ok || !nok {
			continue
		}
		w, wok := lastBefore(wakes, t0, c.sent)
		if !wok {
			continue
		}
		traced++
		add := func(name string, from, to time.Time) { steps[name] = append(steps[name], ms(to.Sub(from))) }
		add(StepNotification, t0, n)
		add(StepWake, n, w)
		add(StepToClaim, w, c.sent)
		add(StepClaim, c.sent, c.replied)
		add(StepToHandler, c.replied, t1)
		totals = append(totals, ms(t1.Sub(t0)))
	}
	res = breakdownResult(SystemFila, ModeNotify, rate, lat, traced, totals, steps,
		[]string{StepNotification, StepWake, StepToClaim, StepClaim, StepToHandler})
	res.BareRoundTripMs, err = bareRoundTrip(ctx, pool)
	return res, err
}

// breakdownFloor runs the listen+claim floor at rate with its claims traced.
func (s *suite) breakdownFloor(ctx context.Context, rate int) (bench.BreakdownResult, error) {
	var mu sync.Mutex
	claims := map[int64]jobSteps{}
	lat, rec, err := s.runFloorTraced(ctx, FloorListenClaim, rate, func(id int64, notified, sent, replied time.Time) {
		mu.Lock()
		claims[id] = jobSteps{notified: notified, sent: sent, replied: replied}
		mu.Unlock()
	})
	if err != nil {
		return bench.BreakdownResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	steps := map[string][]float64{}
	var totals []float64
	traced := 0
	for id, c := range claims {
		t0, t1, ok := rec.times(id)
		// Only a claim that followed the job's own notification: one sent
		// for an earlier job's found this one by chance.
		if !ok || c.notified.Before(t0) {
			continue
		}
		traced++
		add := func(name string, from, to time.Time) { steps[name] = append(steps[name], ms(to.Sub(from))) }
		add(StepNotification, t0, c.notified)
		add(StepToClaim, c.notified, c.sent)
		add(StepClaim, c.sent, c.replied)
		totals = append(totals, ms(t1.Sub(t0)))
	}
	return breakdownResult(SystemFloor, FloorListenClaim, rate, lat, traced, totals, steps,
		[]string{StepNotification, StepToClaim, StepClaim}), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func breakdownResult(system, mode string, rate int, lat bench.LatencyResult, traced int, totals []float64,
	steps map[string][]float64, order []string) bench.BreakdownResult {
	res := bench.BreakdownResult{System: system, Mode: mode, RatePerSec: rate, Jobs: lat.Count, Traced: traced,
		LatencyP50Ms: lat.P50Ms, TracedP50Ms: median(totals), TracedMeanMs: mean(totals)}
	for _, name := range order {
		v := steps[name]
		res.Steps = append(res.Steps, bench.BreakdownStep{Name: name, P50Ms: median(v), MeanMs: mean(v)})
	}
	return res
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	sum := 0.0
	for _, x := range v {
		sum += x
	}
	return sum / float64(len(v))
}

// bareRoundTrip is the median of SELECT 1 round trips on pool: what any
// statement costs on it before the server does any work.
func bareRoundTrip(ctx context.Context, pool *pgxpool.Pool) (float64, error) {
	v := make([]float64, 0, bareRoundTrips)
	for range bareRoundTrips {
		begin := time.Now()
		var one int
		if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
			return 0, fmt.Errorf("bare round trip: %w", err)
		}
		v = append(v, ms(time.Since(begin)))
	}
	return median(v), nil
}
