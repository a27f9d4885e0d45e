package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/runtime"
)

// The high-availability scenarios run on Env.Patroni: two PostgreSQL nodes
// managed by Patroni in synchronous_mode, which the runtimes and the
// producer reach through the cluster's multi-host DSN
// (target_session_attrs=read-write), for the main DSN and the listen DSN
// alike. Jobs flow in at a steady rate while the fault happens; each mode
// (notify, WAL) gets a database and runtimes of its own, and a fault of its
// own.
const (
	haEvery       = 20 * time.Millisecond // one insert every 20 ms: 50 jobs/s
	haConcurrency = 4
	// haLease is longer than a failover takes, so a handler that finished
	// during the fault still owns its attempt when its outcome is written.
	haLease = 10 * time.Second
	// haResumeLimit bounds how long after the new primary accepts writes
	// the runtimes may take to pick jobs up again: a few seconds are
	// expected (the claim's error backoff caps at 5 s); waiting for the
	// 30 s safety poll is a failure.
	haResumeLimit = 15 * time.Second
)

// haJobs is how many acknowledged inserts each mode's flow lasts for.
func haJobs(size Size) int { return max(150, min(size.Jobs/10, 3000)) }

// haWorkers is how many runtimes each mode runs.
func haWorkers(size Size) int { return max(2, min(size.Workers, 4)) }

// haScenarios are the scenarios that need Env.Patroni.
var haScenarios = []string{"ha-switchover", "ha-failover"}

// NeedsPatroni reports whether the named scenario runs on a Patroni
// cluster (Env.Patroni), which its caller must start.
func NeedsPatroni(name string) bool { return slices.Contains(haScenarios, name) }

// HASwitchover makes a planned switchover (Patroni's POST /switchover: the
// primary shuts down cleanly once its synchronous standby has everything,
// the standby is promoted) while jobs flow in at 50/s and runtimes drain
// them, once with notify runtimes and once with WAL ones. Every job whose
// insert was acknowledged must end completed, its effect recorded exactly
// once (the handler completes its job in the effect's transaction); no two
// runs of a job may overlap; every runtime keeps running, claims again and
// gets its wake source back on the new primary (LISTEN again, or a new
// temporary slot there), and jobs are picked up again within haResumeLimit
// of the new primary accepting writes. Recovery is the time from the start
// of the fault to the first job picked up after that (the worse of the two
// modes); the notes split it into Patroni's part (until the new primary
// accepts writes) and Fila's (until a job is picked up there).
func HASwitchover(ctx context.Context, env *Env, size Size) (*Result, error) {
	return env.ha(ctx, size, haSwitchover)
}

// HAFailover is HASwitchover with a crash instead: the leader's postmaster
// is killed with SIGKILL, and Patroni promotes the synchronous standby.
func HAFailover(ctx context.Context, env *Env, size Size) (*Result, error) {
	return env.ha(ctx, size, haFailover)
}

type haFaultKind int

const (
	haSwitchover haFaultKind = iota
	haFailover
)

func (k haFaultKind) String() string {
	if k == haSwitchover {
		return "switchover"
	}
	return "failover"
}

func (e *Env) ha(ctx context.Context, size Size, kind haFaultKind) (*Result, error) {
	if e.Patroni == nil {
		return nil, fmt.Errorf("%w: needs a Patroni cluster (Env.Patroni)", errSkipped)
	}
	jobs, workers := haJobs(size), haWorkers(size)
	res := &Result{Load: fmt.Sprintf("%d jobs at 50/s × notify, WAL; %d runtimes × %d", jobs, workers, haConcurrency)}
	// The Patroni cluster is the server: its multi-host DSN for everything,
	// no pooler (a PgBouncer in front of an HA cluster must itself follow
	// the primary; docs/operating.md says how).
	he := *e
	he.AdminDSN, he.PoolerDSN, he.Cluster, he.Bouncer = e.Patroni.DSN("postgres"), "", nil, nil
	he.created = e.Patroni.WaitReplayed
	for _, mode := range []runtime.Mode{runtime.ModeNotify, runtime.ModeWAL} {
		out, err := he.haRun(ctx, mode, kind, jobs, workers)
		if err != nil {
			return nil, fmt.Errorf("%s mode: %w", mode, err)
		}
		out.judge(res)
	}
	res.note("main and listen DSNs: both nodes, target_session_attrs=read-write; Patroni synchronous_mode, loop_wait 1 s, primary_start_timeout 0")
	return res, nil
}

// haOutcome is what one mode's run measured.
type haOutcome struct {
	mode     runtime.Mode
	kind     haFaultKind
	from, to string // the old and the new primary
	faultAt  time.Time
	upAt     time.Time // the new primary accepted writes
	// resumedAt is when the first handler started after upAt.
	resumedAt time.Time
	// claimedAgain is, per runtime, how long after upAt its first claim
	// statement succeeded (negative: none within the wait).
	claimedAgain []time.Duration
	reconnects   []uint64 // per runtime: its wake source's reconnections
	healthy      []bool   // per runtime: its wake source was up at the end
	resets       uint64   // read-only resets, all runtimes
	ins          *haInserter
	counts       tableCounts
	lost         []int64 // acknowledged, not completed
	unacked      int     // rows whose insert reported an error but committed
	overlapping  []int64
	worstOverlap time.Duration
	okTwice      []int64
	failures     []string
	pickups      []time.Duration // pickup delays of jobs inserted a second after upAt
}

func (e *Env) haRun(ctx context.Context, mode runtime.Mode, kind haFaultKind, jobs, workers int) (*haOutcome, error) {
	out := &haOutcome{mode: mode, kind: kind}
	db, err := e.newDatabase(ctx, "ha")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	if _, err := db.pool.Exec(ctx, runsTableSQL); err != nil {
		return nil, err
	}
	log := newRunLog()
	clocks := make([]*haClock, workers)
	rts := make([]*liveRuntime, 0, workers)
	var pools []*pgxpool.Pool
	defer func() {
		for _, lr := range rts {
			_ = lr.stop(30 * time.Second)
		}
		for _, p := range pools {
			p.Close()
		}
	}()
	for i := range workers {
		// The handlers' own pool goes the same way as the runtime's.
		pc, err := pgconfig.Pool(db.dsn)
		if err != nil {
			return nil, err
		}
		pc.MaxConns = haConcurrency
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, err
		}
		pools = append(pools, pool)
		clocks[i] = &haClock{}
		lr, err := startRuntime(ctx, runtime.Config{
			DSN: db.dsn, ListenDSN: db.direct, Mode: mode, Observer: clocks[i],
			Kinds: []runtime.Kind{{Name: "record", Handler: func(ctx context.Context, j *runtime.Job) error {
				r := log.begin(j.ID, j.Attempt, i)
				start := time.Now()
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, insertRunSQL, j.ID, j.Attempt, i, start); err != nil {
						return err
					}
					return runtime.CompleteTx(ctx, tx, j)
				})
				log.end(r, err == nil)
				return err
			}}},
			Concurrency: haConcurrency, Lease: haLease, ClaimBatch: 50,
			RetryBase: 50 * time.Millisecond, RetryMax: time.Second,
			SafetyPoll: 30 * time.Second,
			Logger:     e.logger().Named(fmt.Sprintf("ha-%s-%d", mode, i)),
		})
		if err != nil {
			return nil, fmt.Errorf("runtime %d: %w", i, err)
		}
		rts = append(rts, lr)
	}
	before := make([]uint64, workers)
	for i, lr := range rts {
		before[i] = lr.rt.Stats().Reconnects
	}

	e.progress("%s: %d runtimes ready; %d jobs flowing in at 50/s", mode, workers, jobs)
	ins, err := startInserter(ctx, db.dsn, jobs)
	if err != nil {
		return nil, err
	}
	out.ins = ins
	defer ins.stop()
	if !waitFor(ctx, 60*time.Second, func() bool { n, _ := log.progress(); return n >= jobs/4 }) {
		return nil, fmt.Errorf("a quarter of the jobs did not run within 60s")
	}

	// The fault. The new primary is the current synchronous standby: watch
	// it accept writes, at 20 ms resolution, from the moment the fault
	// begins (Patroni's switchover call answers a second or more later).
	leader, standby, err := e.Patroni.WaitSynced(ctx)
	if err != nil {
		return nil, err
	}
	out.from, out.to = leader.Name, standby.Name
	e.progress("%s: %s of %s; %s is its synchronous standby", mode, kind, leader.Name, standby.Name)
	watch := make(chan time.Time, 1)
	wctx, stopWatch := context.WithTimeout(ctx, 2*time.Minute)
	defer stopWatch()
	out.faultAt = time.Now()
	go func() {
		for {
			if ok, err := e.Patroni.IsPrimary(wctx, standby.Name); err == nil && ok {
				watch <- time.Now()
				return
			}
			if !sleepCtx(wctx, 20*time.Millisecond) {
				close(watch)
				return
			}
		}
	}()
	switch kind {
	case haSwitchover:
		from, to, err := e.Patroni.Switchover(ctx)
		if err != nil {
			return nil, err
		}
		if from != leader.Name || to != standby.Name {
			return nil, fmt.Errorf("switched over %s → %s, expected %s → %s", from, to, leader.Name, standby.Name)
		}
	case haFailover:
		if _, _, err := e.Patroni.KillLeaderPostmaster(ctx); err != nil {
			return nil, err
		}
	}
	var ok bool
	if out.upAt, ok = <-watch; !ok {
		return nil, fmt.Errorf("%s did not accept writes within 2 minutes of the %s", standby.Name, kind)
	}
	stopWatch()
	db.pool.Reset() // its connections to the old primary are gone
	e.progress("%s: %s accepts writes %.2fs after the %s began", mode, standby.Name, out.upAt.Sub(out.faultAt).Seconds(), kind)

	// Pickup resumes: the first handler start after the new primary is up.
	waitFor(ctx, 60*time.Second, func() bool {
		out.resumedAt = firstStartAfter(log.snapshot(), out.upAt)
		return !out.resumedAt.IsZero()
	})
	// The flow goes on until every insert is acknowledged; then every job
	// in the table must complete (a claim or outcome lost in the fault
	// comes back when its lease expires).
	if !waitFor(ctx, 2*time.Minute, ins.finished) {
		out.failures = append(out.failures, fmt.Sprintf("the producer did not get its %d inserts acknowledged within 2 minutes", jobs))
	}
	ins.stop()
	waitFor(ctx, time.Minute+2*haLease, func() bool {
		c, err := countJobs(ctx, db.pool, false)
		return err == nil && c.completed == c.jobs
	})
	// Every runtime claims again: give each the time to come out of its
	// claim backoff, whether or not jobs are left for it.
	waitFor(ctx, haResumeLimit, func() bool {
		for _, c := range clocks {
			if c.firstAfter(out.upAt).IsZero() {
				return false
			}
		}
		return true
	})
	// And every wake source is back on the new primary: a WAL source
	// creates its slot there once the promotion's transactions are over,
	// and a source between reconnection attempts may be in its backoff.
	waitFor(ctx, haResumeLimit, func() bool {
		for i, lr := range rts {
			if st := lr.rt.Stats(); !st.Healthy || st.Reconnects == before[i] {
				return false
			}
		}
		return true
	})
	for i, lr := range rts {
		if err := lr.failed(); err != nil {
			out.failures = append(out.failures, fmt.Sprintf("runtime %d stopped during the run: %v", i, err))
		}
		st := lr.rt.Stats()
		out.reconnects = append(out.reconnects, st.Reconnects-before[i])
		out.healthy = append(out.healthy, st.Healthy)
		out.resets += st.ReadOnlyResets
		d := time.Duration(-1)
		if at := clocks[i].firstAfter(out.upAt); !at.IsZero() {
			d = at.Sub(out.upAt)
		}
		out.claimedAgain = append(out.claimedAgain, d)
	}
	for i, lr := range rts {
		if err := lr.stop(30 * time.Second); err != nil {
			out.failures = append(out.failures, fmt.Sprintf("runtime %d: Run returned %v", i, err))
		}
	}
	rts = nil

	runs := log.snapshot()
	out.overlapping, out.worstOverlap = overlapStats(runs, time.Now())
	out.okTwice = okTwice(runs)
	started := map[int64]time.Time{}
	for _, r := range runs {
		if s, ok := started[r.job]; !ok || r.start.Before(s) {
			started[r.job] = r.start
		}
	}
	for id, at := range ins.ackedSince(out.upAt.Add(time.Second)) {
		if s, ok := started[id]; ok {
			out.pickups = append(out.pickups, max(0, s.Sub(at)))
		}
	}
	if out.counts, err = countJobsRetry(ctx, db); err != nil {
		return nil, err
	}
	if out.lost, out.unacked, err = ins.judge(ctx, db); err != nil {
		return nil, err
	}
	return out, nil
}

// judge adds one mode's figures and checks to res.
func (o *haOutcome) judge(res *Result) {
	c := o.counts
	res.Lost += len(o.lost)
	res.Duplicated += len(c.jobsTwice)
	res.Overlapping += len(o.overlapping)
	res.WorstOverlap = max(res.WorstOverlap, o.worstOverlap)
	up := o.upAt.Sub(o.faultAt)
	var resumed time.Duration
	if !o.resumedAt.IsZero() {
		resumed = o.resumedAt.Sub(o.upAt)
		res.Recovery = max(res.Recovery, o.resumedAt.Sub(o.faultAt))
	}
	m := string(o.mode)
	for _, f := range o.failures {
		res.check(false, "%s: %s", m, f)
	}
	res.check(len(o.lost) == 0, "%s: acknowledged jobs not completed: %s", m, ids(o.lost, 10))
	res.check(c.completed == c.jobs, "%s: %d of %d jobs in the table did not complete (pending %d, running %d, dead %d)",
		m, c.jobs-c.completed, c.jobs, c.pending, c.running, c.dead)
	res.check(len(o.overlapping) == 0, "%s: jobs run twice at the same time: %s", m, ids(o.overlapping, 10))
	res.check(len(c.jobsTwice) == 0, "%s: jobs whose effect was recorded twice: %s", m, ids(c.jobsTwice, 10))
	res.check(c.jobsWithoutRun == 0, "%s: %d jobs completed without their effect", m, c.jobsWithoutRun)
	res.check(!o.resumedAt.IsZero(), "%s: no job was picked up after %s became the primary", m, o.to)
	res.check(o.resumedAt.IsZero() || resumed <= haResumeLimit, "%s: jobs were picked up again %s after %s accepted writes (limit %s)",
		m, resumed.Round(time.Millisecond), o.to, haResumeLimit)
	worst := time.Duration(0)
	for i, d := range o.claimedAgain {
		res.check(d >= 0, "%s: runtime %d made no claim within %s of the new primary: it did not recover", m, i, haResumeLimit)
		worst = max(worst, d)
	}
	for i := range o.healthy {
		res.check(o.healthy[i], "%s: runtime %d's wake source was down at the end", m, i)
		res.check(o.reconnects[i] > 0, "%s: runtime %d's wake source never reconnected, yet its primary went away", m, i)
	}
	ins := o.ins
	res.note("%s, %s %s → %s: %s accepted writes %.2fs after the %s began; jobs picked up again %.2fs after that, every runtime claiming again within %.2fs; "+
		"wake sources reconnected %v times",
		m, o.kind, o.from, o.to, o.to, up.Seconds(), o.kind, resumed.Seconds(), worst.Seconds(), o.reconnects)
	refused := "none refused"
	if ins.failed > 0 {
		refused = fmt.Sprintf("%d refused over %.2fs while no node accepted writes", ins.failed, ins.lastFail.Sub(ins.firstFail).Seconds())
	}
	res.note("%s: %d inserts acknowledged, %d of them completed; %s (%d of those committed all the same, and completed); "+
		"read-only connection resets %d; pickup after recovery: median %s, max %s (%d jobs inserted from a second after the new primary)",
		m, len(ins.acked), len(ins.acked)-len(o.lost), refused, o.unacked, o.resets, percentile(o.pickups, 50), percentile(o.pickups, 100), len(o.pickups))
	if ins.failed > 0 && !res.OK() {
		res.note("%s: last refused insert: %s", m, oneLine(ins.lastErr))
	}
	if len(o.okTwice) > 0 {
		res.note("%s: handlers that returned success twice for one job (their first commit's answer was lost; the second was fenced): %d (%s)",
			m, len(o.okTwice), ids(o.okTwice, 5))
	}
}

func oneLine(err error) string {
	if err == nil {
		return ""
	}
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 240 {
		s = s[:240] + "…"
	}
	return s
}

func percentile(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "—"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(time.Millisecond).String()
}

func firstStartAfter(runs []run, t time.Time) time.Time {
	var first time.Time
	for _, r := range runs {
		if r.start.After(t) && (first.IsZero() || r.start.Before(first)) {
			first = r.start
		}
	}
	return first
}

func countJobsRetry(ctx context.Context, db *database) (tableCounts, error) {
	var c tableCounts
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if c, err = countJobs(ctx, db.pool, true); err == nil {
			return c, nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			break
		}
	}
	return c, fmt.Errorf("count the jobs: %w", err)
}

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

// haClock is a runtime.Observer that keeps the times of the runtime's
// successful claim statements, empty or not.
type haClock struct {
	mu     sync.Mutex
	claims []time.Time
}

func (c *haClock) Woken(string, runtime.WakeReason) {}
func (c *haClock) Claimed(string, []*runtime.Job, int) {
	c.mu.Lock()
	c.claims = append(c.claims, time.Now())
	c.mu.Unlock()
}
func (c *haClock) Finished(*runtime.Job, runtime.Outcome, time.Duration) {}

// firstAfter returns the first claim after t, or zero.
func (c *haClock) firstAfter(t time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := sort.Search(len(c.claims), func(i int) bool { return c.claims[i].After(t) })
	if i == len(c.claims) {
		return time.Time{}
	}
	return c.claims[i]
}

// haInserter inserts one job every haEvery through the multi-host DSN, as an
// application would, until want inserts are acknowledged. An insert that
// fails is not acknowledged: the application would retry it, and whether it
// committed is for the table to say.
type haInserter struct {
	pool   *pgxpool.Pool
	want   int
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	acked     map[int64]time.Time // job id → when its insert returned
	failed    int
	firstFail time.Time
	lastFail  time.Time
	lastErr   error
}

func startInserter(ctx context.Context, dsn string, want int) (*haInserter, error) {
	pc, err := pgconfig.Pool(dsn)
	if err != nil {
		return nil, err
	}
	pc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ins := &haInserter{pool: pool, want: want, cancel: cancel, done: make(chan struct{}), acked: map[int64]time.Time{}}
	go func() {
		defer close(ins.done)
		defer pool.Close()
		tick := time.NewTicker(haEvery)
		defer tick.Stop()
		for !ins.finished() {
			actx, acancel := context.WithTimeout(ictx, 10*time.Second)
			id, err := runtime.Insert(actx, pool, "record", nil, &runtime.InsertOpts{MaxAttempts: 25})
			acancel()
			now := time.Now()
			ins.mu.Lock()
			switch {
			case err == nil:
				ins.acked[id] = now
			case ictx.Err() == nil:
				if ins.failed == 0 {
					ins.firstFail = now
				}
				ins.failed++
				ins.lastFail, ins.lastErr = now, err
				if isConnError(err) {
					pool.Reset() // a connection to the old primary: open new ones
				}
			}
			ins.mu.Unlock()
			select {
			case <-ictx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return ins, nil
}

// isConnError reports whether err came from a broken connection rather
// than from the statement.
func isConnError(err error) bool {
	var pgErr interface{ SQLState() string }
	return !errors.As(err, &pgErr) || runtime.IsReadOnly(err) || strings.HasPrefix(pgErr.SQLState(), "57")
}

func (ins *haInserter) finished() bool {
	ins.mu.Lock()
	defer ins.mu.Unlock()
	return len(ins.acked) >= ins.want
}

func (ins *haInserter) stop() {
	ins.cancel()
	<-ins.done
}

// ackedSince returns the acknowledged inserts made at or after t.
func (ins *haInserter) ackedSince(t time.Time) map[int64]time.Time {
	ins.mu.Lock()
	defer ins.mu.Unlock()
	out := map[int64]time.Time{}
	for id, at := range ins.acked {
		if !at.Before(t) {
			out[id] = at
		}
	}
	return out
}

// judge returns the acknowledged jobs that are not completed (or not in
// the table at all), and how many jobs in the table were not acknowledged.
func (ins *haInserter) judge(ctx context.Context, db *database) (lost []int64, unacked int, err error) {
	ins.mu.Lock()
	acked := make([]int64, 0, len(ins.acked))
	for id := range ins.acked {
		acked = append(acked, id)
	}
	ins.mu.Unlock()
	for attempt := 0; ; attempt++ {
		lost, unacked, err = nil, 0, nil
		rows, qerr := db.pool.Query(ctx, `SELECT a.id, j.id IS NOT NULL AND j.state = 'completed'
			FROM unnest($1::bigint[]) a(id) LEFT JOIN fila_jobs j ON j.id = a.id`, acked)
		if qerr == nil {
			for rows.Next() {
				var id int64
				var ok bool
				if err = rows.Scan(&id, &ok); err != nil {
					break
				}
				if !ok {
					lost = append(lost, id)
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
			if err == nil {
				err = db.pool.QueryRow(ctx, `SELECT count(*) FROM fila_jobs WHERE id <> ALL($1::bigint[])`, acked).Scan(&unacked)
			}
		} else {
			err = qerr
		}
		if err == nil || attempt == 20 || !sleepCtx(ctx, 250*time.Millisecond) {
			break
		}
	}
	slices.Sort(lost)
	return lost, unacked, err
}
