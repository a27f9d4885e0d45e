package runtime

import "time"

// deadlines orders the attempts whose handlers run by the local time at
// which each must stop (attempt.stopAt), for one timer that fires at the
// first of them. A timer per attempt cost a busy worker a tenth of its Go
// CPU in the timers' own locks: started at each claim and stopped at each
// outcome, from every handler's goroutine at once. Entries leave the heap
// when their handler returns or the attempt is dropped; a renewal moves
// its entry later. The completer's mutex guards it.
//
// The heap is written out for *attempt rather than through container/heap:
// unwatchLocked runs on every job's goroutine, and the interface calls'
// frames made that small stack grow (copied, then freed at the goroutine's
// end) in a third of the jobs of a drain.
type deadlines []*attempt

func (d deadlines) less(i, j int) bool { return d[i].stopAt.Before(d[j].stopAt) }

func (d deadlines) swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].heapIndex, d[j].heapIndex = i, j
}

// up moves entry i towards the root while it is earlier than its parent.
func (d deadlines) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !d.less(i, parent) {
			return
		}
		d.swap(i, parent)
		i = parent
	}
}

// down moves entry i towards the leaves while a child is earlier; it
// reports whether the entry moved.
func (d deadlines) down(i int) bool {
	start := i
	for {
		first := 2*i + 1
		if first >= len(d) {
			break
		}
		if second := first + 1; second < len(d) && d.less(second, first) {
			first = second
		}
		if !d.less(first, i) {
			break
		}
		d.swap(i, first)
		i = first
	}
	return i > start
}

// push adds at.
func (d *deadlines) push(at *attempt) {
	at.heapIndex = len(*d)
	*d = append(*d, at)
	d.up(at.heapIndex)
}

// remove takes out the entry at index i and returns it.
func (d *deadlines) remove(i int) *attempt {
	h := *d
	last := len(h) - 1
	if i != last {
		h.swap(i, last)
		if !h[:last].down(i) {
			h[:last].up(i)
		}
	}
	at := h[last]
	h[last] = nil
	*d = h[:last]
	at.heapIndex = -1
	return at
}

// fix restores the order after the entry at index i changed its stopAt.
func (d deadlines) fix(i int) {
	if !d.down(i) {
		d.up(i)
	}
}

// watchLocked puts at's deadline, stopAt, in the heap (or moves it there),
// and sets the timer earlier if it is now the first. c.mu is held.
func (c *completer) watchLocked(at *attempt, stopAt time.Time) {
	at.stopAt = stopAt
	if at.heapIndex >= 0 {
		c.deadlines.fix(at.heapIndex)
	} else {
		c.deadlines.push(at)
	}
	c.armLocked()
}

// unwatchLocked takes at's deadline out of the heap: its handler returned,
// or the attempt is no longer owned. The timer may still fire for it, and
// finds nothing due. c.mu is held.
func (c *completer) unwatchLocked(at *attempt) {
	if at.heapIndex >= 0 {
		c.deadlines.remove(at.heapIndex)
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
		at := c.deadlines.remove(0)
		if c.closed || at.finishing || at.expired {
			continue
		}
		at.expired = true
		at.job.ctx.stop(ErrLeaseDeadline)
		ended = append(ended, at)
	}
	c.armLocked()
	c.mu.Unlock()
	for _, at := range ended {
		c.logDeadline(at, now)
	}
}
