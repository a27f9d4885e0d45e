package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cut is the network path of one worker to the database: its main DSN and
// its listen DSN each through a proxy (one proxy when both lead to the same
// server), switched together.
type cut struct {
	main, listen       *proxy
	mainDSN, listenDSN string
}

// newCut puts proxies in front of db's servers for one worker.
func newCut(db *database) (*cut, error) {
	mainTarget, err := hostPort(db.dsn)
	if err != nil {
		return nil, err
	}
	listenTarget, err := hostPort(db.direct)
	if err != nil {
		return nil, err
	}
	c := &cut{}
	if c.main, err = startProxy(mainTarget); err != nil {
		return nil, err
	}
	c.listen = c.main
	if listenTarget != mainTarget {
		if c.listen, err = startProxy(listenTarget); err != nil {
			c.close()
			return nil, err
		}
	}
	// A connection attempt into the partition gives up after 2 s.
	if c.mainDSN, err = viaProxy(db.dsn, c.main.addr(), 2); err != nil {
		c.close()
		return nil, err
	}
	if c.listenDSN, err = viaProxy(db.direct, c.listen.addr(), 2); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// set switches both paths.
func (c *cut) set(m proxyMode) {
	c.main.set(m)
	if c.listen != c.main {
		c.listen.set(m)
	}
}

func (c *cut) close() {
	if c.main != nil {
		_ = c.main.close()
	}
	if c.listen != nil && c.listen != c.main {
		_ = c.listen.close()
	}
}

// clock converts the database's times to this machine's wall clock: the
// scenarios run on loopback, so the two agree to within a round trip, but
// the offset is measured rather than assumed.
type clock struct{ offset time.Duration } // database minus local

func measureClock(ctx context.Context, pool *pgxpool.Pool) (clock, error) {
	best := time.Duration(1<<62 - 1)
	var c clock
	for range 5 {
		before := time.Now()
		var db time.Time
		if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
			return c, err
		}
		after := time.Now()
		if rtt := after.Sub(before); rtt < best {
			best = rtt
			c.offset = db.Sub(wall(before.Add(rtt / 2)))
		}
	}
	return c, nil
}

// local is the database time t on this machine's clock.
func (c clock) local(t time.Time) time.Time { return wall(t.Add(-c.offset)) }

// expiry is a lease that expired, as the rescue wrote it into the job's
// error history ("lease expired at …").
type expiry struct {
	job       int64
	attempt   int
	lease     time.Time // the expired lease_until
	rescuedAt time.Time
}

// leaseExpiries reads every lease expiry of db's jobs, on the local clock.
func leaseExpiries(ctx context.Context, db *database, c clock) ([]expiry, error) {
	rows, err := db.pool.Query(ctx, `SELECT j.id, (e->>'attempt')::int, (e->>'at')::timestamptz,
		substring(e->>'error' from 'lease expired at (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)?[+-]\d\d(:\d\d)?)')::timestamptz
		FROM fila_jobs j CROSS JOIN LATERAL jsonb_array_elements(j.errors) e
		WHERE e->>'error' ~ 'lease expired at \d{4}-'
		ORDER BY j.id, 3`)
	if err != nil {
		return nil, fmt.Errorf("read lease expiries: %w", err)
	}
	defer rows.Close()
	var out []expiry
	for rows.Next() {
		var x expiry
		if err := rows.Scan(&x.job, &x.attempt, &x.rescuedAt, &x.lease); err != nil {
			return nil, fmt.Errorf("read lease expiries: %w", err)
		}
		x.lease, x.rescuedAt = c.local(x.lease), c.local(x.rescuedAt)
		out = append(out, x)
	}
	return out, rows.Err()
}

// margin is the time a run's attempt had left on its lease when the run
// ended: negative when the run outlived its lease.
type margin struct {
	job     int64
	attempt int
	worker  int
	left    time.Duration
	end     time.Time // when the run ended (now, if it had not)
	// beforeRescue: the run ended before its job was rescued (its end is
	// known and came before the rescue).
	beforeRescue bool
	rescuedAt    time.Time
}

// rescueMargins pairs each lease expiry with the run of its attempt (the
// latest of that job and attempt to start before the rescue) and measures
// the margin. now ends runs still going.
func rescueMargins(runs []run, exps []expiry, now time.Time) []margin {
	var out []margin
	for _, x := range exps {
		var best *run
		for i := range runs {
			r := &runs[i]
			if r.job == x.job && r.attempt == x.attempt && r.start.Before(x.rescuedAt) && (best == nil || r.start.After(best.start)) {
				best = r
			}
		}
		if best == nil {
			continue // the attempt's handler never started
		}
		end := best.end
		if end.IsZero() {
			end = wall(now)
		}
		out = append(out, margin{job: x.job, attempt: x.attempt, worker: best.worker, left: x.lease.Sub(end), end: end,
			beforeRescue: !best.end.IsZero() && best.end.Before(x.rescuedAt), rescuedAt: x.rescuedAt})
	}
	return out
}

// recordMargins keeps the smallest of ms in res.Margin, counting them in
// res.Rescues.
func (res *Result) recordMargins(ms []margin) {
	for _, m := range ms {
		if res.Rescues == 0 || m.left < res.Margin {
			res.Margin = m.left
		}
		res.Rescues++
	}
}

// measureMargins measures, into res, the margins of every lease of db's jobs
// that expired while its attempt had one of runs, and returns them.
func (res *Result) measureMargins(ctx context.Context, db *database, runs []run) ([]margin, error) {
	clk, err := measureClock(ctx, db.pool)
	if err != nil {
		return nil, err
	}
	exps, err := leaseExpiries(ctx, db, clk)
	if err != nil {
		return nil, err
	}
	ms := rescueMargins(runs, exps, time.Now())
	res.recordMargins(ms)
	return ms, nil
}

// describeMargins says how ms spread, for a note.
func describeMargins(ms []margin) string {
	if len(ms) == 0 {
		return "no lease expired with a run"
	}
	lefts := make([]time.Duration, len(ms))
	for i, m := range ms {
		lefts[i] = m.left
	}
	sort.Slice(lefts, func(i, j int) bool { return lefts[i] < lefts[j] })
	return fmt.Sprintf("smallest %s, largest %s over %d", millis(lefts[0]), millis(lefts[len(lefts)-1]), len(lefts))
}

// waitRunning waits until job id runs and returns when it was claimed
// (started_at), on the local clock.
func waitRunning(ctx context.Context, db *database, c clock, id int64, within time.Duration) (time.Time, bool) {
	var started time.Time
	ok := pollFor(ctx, within, 2*time.Millisecond, func() bool {
		var s *time.Time
		err := db.pool.QueryRow(ctx, `SELECT started_at FROM fila_jobs WHERE id = $1::bigint AND state = 'running'`, id).Scan(&s)
		if err != nil || s == nil {
			return false
		}
		started = c.local(*s)
		return true
	})
	return started, ok
}

// pollFor polls cond every step until it holds, ctx ends or within passes.
func pollFor(ctx context.Context, within, step time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		select {
		case <-ctx.Done():
		case <-time.After(step):
		}
	}
	return true
}

// sleepUntil sleeps until t (wall clock) or ctx ends.
func sleepUntil(ctx context.Context, t time.Time) error {
	select {
	case <-time.After(time.Until(t)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// spread returns n points in [from, to), one at random in each of n equal
// slices: random, yet covering the whole interval.
func spread(n int, from, to time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	w := (to - from) / time.Duration(n)
	for i := range out {
		out[i] = from + time.Duration(i)*w + time.Duration(rand.Int64N(int64(w)))
	}
	return out
}

// rounds is how many random points a scenario tries: a share of Size.Jobs,
// from 3 (the tests) to 10.
func rounds(size Size) int { return max(3, min(10, size.Jobs/2000)) }

// firstRun is shell that runs first on the first run of each job and again
// on the later ones (a directory made per job under dir tells them apart:
// attempt numbers cannot, as an attempt given back is not counted).
func firstRun(dir, first, again string) string {
	return fmt.Sprintf(`if mkdir -p %s && mkdir %s/$FILA_JOB_ID 2>/dev/null; then %s; else %s; fi`, dir, dir, first, again)
}

// sleepingCommand is an --exec command recorded in file: it sleeps first
// seconds on its job's first run, again on later ones, in a child it
// reports, and writes its end if it was not killed.
func sleepingCommand(file, markers string, first, again float64) string {
	return fmt.Sprintf(`%s; %s; sleep $d & p=$!; %s; wait $p; %s`,
		stampLine(file, "start", ""), firstRun(markers, fmt.Sprintf("d=%g", first), fmt.Sprintf("d=%g", again)),
		stampLine(file, "pid", "$p"), stampLine(file, "end", ""))
}

// jobFinal is a job's row at the end of a scenario.
type jobFinal struct {
	state      string
	attempts   int
	finishedAt time.Time
	lastError  string
}

func readJob(ctx context.Context, db *database, id int64) (jobFinal, error) {
	var f jobFinal
	var fin *time.Time
	err := db.pool.QueryRow(ctx, `SELECT state, attempts, finished_at, coalesce(last_error, '') FROM fila_jobs WHERE id = $1::bigint`, id).
		Scan(&f.state, &f.attempts, &fin, &f.lastError)
	if fin != nil {
		f.finishedAt = *fin
	}
	return f, err
}

// runsOf returns job's runs, in the order they started.
func runsOf(runs []run, job int64) []run {
	var out []run
	for _, r := range runs {
		if r.job == job {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}
