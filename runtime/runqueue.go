package runtime

import (
	"sync"
	"sync/atomic"
)

// runQueue hands a queue's claimed attempts to its executors: long-lived
// goroutines that each take attempts from it in a loop and sleep only when
// it is empty.
//
// One channel send per attempt to an executor that then parked again cost a
// wake-up and a sleep of two goroutines per job, and kept as many executors
// alive as the queue's limit, whose stacks every garbage collection scans.
// Here an executor that finishes a handler takes the next attempt itself,
// and a sleeping one is woken only when no other executor is about to look:
// like the Go scheduler's spinning threads, at most one executor at a time
// is woken or started without an attempt in hand. That one, once it takes
// an attempt, wakes the next if attempts are left, so an attempt never
// waits behind a handler that still runs: attempts are only ever queued for
// free slots, so while any is queued, fewer handlers run than the limit and
// another executor can take it.
type runQueue struct {
	mu   sync.Mutex
	wake sync.Cond // on mu; an executor parked on it sleeps
	jobs []*Job    // FIFO from head
	head int
	// parked executors wait on wake; looking ones were woken or started
	// and have not taken an attempt yet (at most one at a time, see
	// ensureLookingLocked); executors counts them all.
	parked, looking, executors int
	// finishing counts executors between their handler's return and their
	// next look at jobs: one of them takes what is queued meanwhile, so
	// none needs waking. Changed under mu only when decremented, read
	// under mu.
	finishing atomic.Int32
	closed    bool
}

func (q *runQueue) init() { q.wake.L = &q.mu }

// push queues a claimed attempt and makes sure an executor looks.
func (q *runQueue) push(p *producer, job *Job) {
	q.mu.Lock()
	q.jobs = append(q.jobs, job)
	q.ensureLookingLocked(p)
	q.mu.Unlock()
}

// ensureLookingLocked wakes (or starts) an executor if attempts are queued
// and none is about to take one. q.mu is held.
func (q *runQueue) ensureLookingLocked(p *producer) {
	if q.head == len(q.jobs) || q.looking > 0 || q.finishing.Load() > 0 {
		return
	}
	q.looking++
	if q.parked > 0 {
		q.parked--
		q.wake.Signal()
		return
	}
	q.executors++
	go p.executor()
}

// popLocked takes the oldest queued attempt, nil if none. q.mu is held.
func (q *runQueue) popLocked() *Job {
	if q.head == len(q.jobs) {
		return nil
	}
	job := q.jobs[q.head]
	q.jobs[q.head] = nil // hold no attempt that runs elsewhere
	q.head++
	if q.head == len(q.jobs) {
		q.jobs, q.head = q.jobs[:0], 0
	}
	return job
}

// close lets executors end once the queue is empty: nothing is pushed any
// more. Parked ones are woken to see it.
func (q *runQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.looking += q.parked
	q.parked = 0
	q.wake.Broadcast()
	q.mu.Unlock()
}

// executor runs queued attempts until the queue is closed and empty. It
// was counted as looking by whoever started it.
func (p *producer) executor() {
	q := &p.runq
	looking := true
	q.mu.Lock()
	for {
		job := q.popLocked()
		if looking {
			q.looking--
			looking = false
		}
		if job == nil {
			if q.closed {
				q.executors--
				q.mu.Unlock()
				return
			}
			q.parked++
			q.wake.Wait()
			looking = true // counted by ensureLookingLocked or close
			continue
		}
		// Others are left: the next executor wakes while this one runs.
		q.ensureLookingLocked(p)
		q.mu.Unlock()
		p.execute(job)
		// Finishing before the slot is freed: the claim the freed slot
		// allows then finds this executor instead of waking another.
		q.finishing.Add(1)
		p.release()
		q.mu.Lock()
		q.finishing.Add(-1)
	}
}
