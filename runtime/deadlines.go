package runtime

import (
	"container/heap"
	"time"
)

// deadlines orders the attempts whose handlers run by the local time at
// which each must stop (attempt.stopAt), for one timer that fires at the
// first of them. A timer per attempt cost a busy worker a tenth of its Go
// CPU in the timers' own locks: started at each claim and stopped at each
// outcome, from every handler's goroutine at once. Entries leave the heap
// when their handler returns or the attempt is dropped; a renewal moves
// its entry later. The completer's mutex guards it.
type deadlines []*attempt

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].stopAt.Before(d[j].stopAt) }
func (d deadlines) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].heapIndex, d[j].heapIndex = i, j
}

func (d *deadlines) Push(x any) {
	at := x.(*attempt)
	at.heapIndex = len(*d)
	*d = append(*d, at)
}

func (d *deadlines) Pop() any {
	old := *d
	at := old[len(old)-1]
	old[len(old)-1] = nil
	*d = old[:len(old)-1]
	at.heapIndex = -1
	return at
}

// watchLocked puts at's deadline, stopAt, in the heap (or moves it there),
// and sets the timer earlier if it is now the first. c.mu is held.
func (c *completer) watchLocked(at *attempt, stopAt time.Time) {
	at.stopAt = stopAt
	if at.heapIndex >= 0 {
		heap.Fix(&c.deadlines, at.heapIndex)
	} else {
		heap.Push(&c.deadlines, at)
	}
	c.armLocked()
}

// unwatchLocked takes at's deadline out of the heap: its handler returned,
// or the attempt is no longer owned. The timer may still fire for it, and
// finds nothing due. c.mu is held.
func (c *completer) unwatchLocked(at *attempt) {
	if at.heapIndex >= 0 {
		heap.Remove(&c.deadlines, at.heapIndex)
	}
}

// armLocked sets the timer for the first deadline unless it already fires
// before it. Attempts are claimed in order, each deadline later than the
// ones before it, so the timer is rarely reset. c.mu is held.
func (c *completer) armLocked() {
	if c.closed || len(c.deadlines) == 0 {
		return
	}
	first := c.deadlines[0].stopAt
	if !c.timerAt.IsZero() && !c.timerAt.After(first) {
		return
	}
	c.timerAt = first
	c.timer.Reset(time.Until(first))
}

// deadlinesDue runs when the timer fires: it ends every attempt whose
// deadline has passed (see deadline) and sets the timer for the next.
func (c *completer) deadlinesDue() {
	c.mu.Lock()
	c.timerAt = time.Time{}
	now := time.Now()
	var ended []*attempt
	for len(c.deadlines) > 0 && !c.deadlines[0].stopAt.After(now) {
		at := heap.Pop(&c.deadlines).(*attempt)
		if c.closed || at.finishing || at.expired {
			continue
		}
		at.expired = true
		at.cancel(ErrLeaseDeadline)
		ended = append(ended, at)
	}
	c.armLocked()
	c.mu.Unlock()
	for _, at := range ended {
		c.logDeadline(at, now)
	}
}
