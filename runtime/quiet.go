package runtime

import "time"

// Sleeping and polling in ModeNotify (see migration 0005): producers
// notify a queue only while some worker sleeps on it. A producer sleeps
// (waits for notifications) while jobs come slowly; when the claims that
// notifications woke take more than Config.BusyRate jobs a second (the
// notifications themselves are coalesced), it stops sleeping, so producers
// stop paying for NOTIFY, and polls instead: busyPollMin after a claim that
// found jobs, doubling up to busyPollMax after empty ones, and after
// busyEmptyPolls empty claims in a row it tries to sleep again.
const (
	busyPollMin    = time.Millisecond
	busyPollMax    = 100 * time.Millisecond
	busyEmptyPolls = 6
)

// quiet decides, for one producer in ModeNotify, between sleeping and
// polling. It does no I/O and reads no clock: each event carries the time,
// and each answer says what the producer does next (a statement to run,
// whose result comes back as the next event, or a timer to arm), so that
// every decision is a plain function of what happened.
type quiet struct {
	busyRate int // Config.BusyRate: jobs a second that make a sleeper poll; negative: never

	asleep      bool          // this worker's row in fila_sleepers exists
	pollEvery   time.Duration // the busy poll's interval while not asleep
	empties     int           // empty claims in a row while polling
	windowStart time.Time
	windowJobs  int // jobs claimed on notifications in the second since windowStart
}

// newQuiet starts awake, ready to sleep after its first empty claim.
func newQuiet(busyRate int) *quiet {
	return &quiet{busyRate: busyRate, pollEvery: busyPollMin, empties: busyEmptyPolls}
}

// quietStep is what the producer does after an event.
type quietStep struct {
	// claimNow: claim again at once.
	claimNow bool
	// poll: arm the busy poll for this long; stopPoll: stop it. Neither:
	// leave it as it is.
	poll     time.Duration
	stopPoll bool
	// sleep: record this worker's sleep (store.Sleep) and report with
	// slept; wake: delete it (store.Wake) and report with woke.
	sleep, wake bool
}

// claimed is the event of a claim that found found jobs, left more work
// (more), and was woken by a notification (byNotify).
func (q *quiet) claimed(now time.Time, found int, more, byNotify bool) quietStep {
	if q.asleep {
		if !byNotify {
			return quietStep{}
		}
		if now.Sub(q.windowStart) > time.Second {
			q.windowStart, q.windowJobs = now, 0
		}
		q.windowJobs += found
		if q.busyRate < 0 || q.windowJobs <= q.busyRate {
			return quietStep{}
		}
		// Producers commit faster than notifications are worth: poll.
		return quietStep{wake: true}
	}
	if more {
		return quietStep{claimNow: true}
	}
	if found > 0 {
		q.empties, q.pollEvery = 0, busyPollMin
		return quietStep{poll: q.pollEvery}
	}
	q.empties++
	if q.empties >= busyEmptyPolls {
		return quietStep{sleep: true}
	}
	return q.backOff()
}

// slept is the event of the sleep statement's answer: ok when this worker
// now sleeps (false: a producer transaction was in flight, or the
// statement failed).
func (q *quiet) slept(now time.Time, ok bool) quietStep {
	if !ok {
		return q.backOff()
	}
	q.asleep = true
	q.windowStart, q.windowJobs = now, 0
	// Once more: what committed before the sleep was recorded is seen now,
	// what commits after is notified.
	return quietStep{claimNow: true, stopPoll: true}
}

// woke is the event of the wake statement's answer: ok when this worker no
// longer sleeps (false: it still does, and producers keep notifying it,
// which loses nothing).
func (q *quiet) woke(ok bool) quietStep {
	if !ok {
		return quietStep{}
	}
	q.asleep, q.empties, q.pollEvery = false, 0, busyPollMin
	return quietStep{poll: q.pollEvery}
}

// backOff doubles the busy poll's interval, up to busyPollMax.
func (q *quiet) backOff() quietStep {
	q.pollEvery = min(2*q.pollEvery, busyPollMax)
	return quietStep{poll: q.pollEvery}
}

// walRecheck decides, in ModeWAL, the claims that follow a WAL wake whose
// claim found nothing (see walRechecks): it reads no clock either.
type walRecheck struct {
	armed int // rechecks armed since the last WAL wake's empty claim
}

// claimed is the event of a claim: foundWork when it found jobs or left
// more, byWAL when the WAL woke it, recheck when it was a recheck. It
// returns the delay of the recheck to arm, or stop to stop the timer.
func (w *walRecheck) claimed(foundWork, byWAL, recheck bool) (arm time.Duration, stop bool) {
	switch {
	case foundWork:
		w.armed = 0
		return 0, true
	case byWAL:
		w.armed = 1
		return walRechecks[0], false
	case recheck && w.armed < len(walRechecks):
		d := walRechecks[w.armed]
		w.armed++
		return d, false
	case recheck:
		w.armed = 0
	}
	return 0, false
}
