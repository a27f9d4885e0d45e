package chaos

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/runtime"
)

// liveRuntime is a runtime running in this process.
type liveRuntime struct {
	rt   *runtime.Runtime
	errc chan error
	err  error
	done bool
}

// startRuntime runs a runtime and waits until it is ready.
func startRuntime(ctx context.Context, cfg runtime.Config) (*liveRuntime, error) {
	rt, err := runtime.New(cfg)
	if err != nil {
		return nil, err
	}
	l := &liveRuntime{rt: rt, errc: make(chan error, 1)}
	go func() { l.errc <- rt.Run(context.WithoutCancel(ctx)) }()
	select {
	case <-rt.Ready():
		return l, nil
	case err := <-l.errc:
		return nil, fmt.Errorf("runtime stopped before it was ready: %w", err)
	case <-time.After(30 * time.Second):
		_ = l.stop(5 * time.Second)
		return nil, fmt.Errorf("runtime not ready after 30s")
	case <-ctx.Done():
		_ = l.stop(5 * time.Second)
		return nil, ctx.Err()
	}
}

// stop stops the runtime gracefully (cancelling handlers after timeout)
// and returns what Run returned.
func (l *liveRuntime) stop(timeout time.Duration) error {
	if l.done {
		return l.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_ = l.rt.Stop(ctx)
	l.err, l.done = <-l.errc, true
	return l.err
}

// failed returns Run's error if the runtime stopped on its own.
func (l *liveRuntime) failed() error {
	if l.done {
		return l.err
	}
	select {
	case err := <-l.errc:
		l.err, l.done = err, true
		if err == nil {
			err = fmt.Errorf("runtime stopped on its own")
		}
		return err
	default:
		return nil
	}
}

// trickle inserts one job at a time at a steady pace and remembers when
// each was inserted and picked up.
type trickle struct {
	mu       sync.Mutex
	inserted map[int64]time.Time
	picked   map[int64]time.Time
	errs     int
	lastErr  error
	cancel   context.CancelFunc
	done     chan struct{}
}

// newTrickle returns a trickle that records pickups; start starts inserting.
func newTrickle() *trickle {
	return &trickle{inserted: map[int64]time.Time{}, picked: map[int64]time.Time{}, done: make(chan struct{})}
}

// start inserts a job of kind every interval until stop.
func (t *trickle) start(pool *pgxpool.Pool, kind string, every time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	t.cancel = cancel
	t.mu.Unlock()
	go func() {
		defer close(t.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			id, err := runtime.Insert(ctx, pool, kind, nil, &runtime.InsertOpts{MaxAttempts: 25})
			at := time.Now()
			t.mu.Lock()
			if err == nil {
				if _, ok := t.inserted[id]; !ok { // picked before Insert returned: keep the pickup
					t.inserted[id] = at
				}
			} else if ctx.Err() == nil {
				t.errs++
				t.lastErr = err
			}
			t.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
}

// pick records that a handler started job id.
func (t *trickle) pick(id int64) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.picked[id]; !ok {
		t.picked[id] = now
	}
	if _, ok := t.inserted[id]; !ok {
		t.inserted[id] = now // picked before Insert returned
	}
}

// stop stops inserting (if it started) and waits for the inserter.
func (t *trickle) stop() {
	t.mu.Lock()
	cancel := t.cancel
	t.cancel = nil
	t.mu.Unlock()
	if cancel != nil {
		cancel()
		<-t.done
	}
}

// since reports the jobs inserted at or after from (and before to, if
// set): how many, how many were picked up, and the longest pickup delay
// (counting jobs not picked up yet as waiting until now).
func (t *trickle) since(from, to time.Time) (n, picked int, worst time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for id, at := range t.inserted {
		if at.Before(from) || (!to.IsZero() && !at.Before(to)) {
			continue
		}
		n++
		p, ok := t.picked[id]
		if ok {
			picked++
		} else {
			p = now
		}
		worst = max(worst, p.Sub(at))
	}
	return n, picked, worst
}

// firstPickAfter returns the first job inserted at or after from that was
// picked up, and its pickup delay.
func (t *trickle) firstPickAfter(from time.Time) (time.Duration, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	type ins struct {
		id int64
		at time.Time
	}
	var list []ins
	for id, at := range t.inserted {
		if !at.Before(from) {
			list = append(list, ins{id, at})
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].at.Before(list[j].at) })
	for _, x := range list {
		if p, ok := t.picked[x.id]; ok {
			return p.Sub(x.at), true
		}
		return 0, false // the first one is not picked up yet
	}
	return 0, false
}

// waitFor polls cond every 10 ms until it holds, ctx ends or within passes.
func waitFor(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	return true
}

// viaProxy returns dsn with its host and port replaced by addr, and a
// connect timeout of seconds.
func viaProxy(dsn, addr string, seconds int) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	u.Host = addr
	q := u.Query()
	q.Set("connect_timeout", fmt.Sprint(seconds))
	if q.Get("sslmode") == "" {
		q.Set("sslmode", "disable") // one connection per attempt, not a TLS try first
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func hostPort(dsn string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", err
	}
	return u.Host, nil
}
