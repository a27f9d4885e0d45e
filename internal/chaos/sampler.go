package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// lockSampler samples pg_stat_activity every 20 ms for sessions of one
// database waiting on a row lock (wait_event_type Lock, wait_event
// transactionid or tuple). A wait seen in two samples in a row is a real
// wait; a single sighting can be the instant a statement ends.
type lockSampler struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	waits  []lockWait
}

// lockWait is one session seen waiting on a row lock in two samples or more.
type lockWait struct {
	pid     int32
	waiter  string // the waiting statement's first line
	blocker string // the blocking session's state and statement's first line
	// bounded: the blocker is one of Fila's own single-statement
	// transactions (claim, finish, heartbeat, release), so the wait lasts at
	// most one such statement; otherwise it waits on a transaction that
	// may last (a handler's, or anything else).
	bounded bool
	samples int // consecutive samples it was seen in
}

func (w lockWait) String() string {
	return fmt.Sprintf("session %d (%s) waited %d samples behind %s", w.pid, w.waiter, w.samples, w.blocker)
}

// filaStatements mark Fila's statements that run as a transaction of their
// own (claimer/sql.go): claim, claim by id (as a call, or its statement sent
// directly), outcomes, heartbeats, release, and the sleep protocol.
// TestSamplerKnowsEveryClaimerStatement keeps this list in step with
// claimer/sql.go.
var filaStatements = []string{
	"fila_claim(", "fila_claim_id(", "/* fila_claim_id */", "fila_finish(", "fila_complete(",
	"fila_heartbeat(", "fila_release(", "fila_sleep(",
}

// blame records who the session waits for. With no blocker left (the wait
// ended between reading pg_stat_activity and pg_blocking_pids), the wait
// lasted about two samples and ended on its own: it counts as bounded unless
// a later sample names a blocker that may last.
func (w *lockWait) blame(state, query string) {
	if state == "" {
		w.blocker, w.bounded = "a session whose wait had just ended", true
		return
	}
	w.blocker, w.bounded = state+": "+firstLine(query), false
	for _, p := range filaStatements {
		w.bounded = w.bounded || (state == "active" && strings.Contains(query, p))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 70 {
		s = s[:70] + "…"
	}
	return s
}

func startLockSampler(db *database) *lockSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &lockSampler{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		prev := map[int32]int{} // pid → index in s.waits, or -1 when seen once
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := db.pool.Query(ctx, `SELECT a.pid, a.query, coalesce(b.state, ''), coalesce(b.query, '')
				FROM pg_stat_activity a
				LEFT JOIN pg_stat_activity b ON b.pid = (pg_blocking_pids(a.pid))[1]
				WHERE a.datname = $1::text AND a.wait_event_type = 'Lock' AND a.wait_event IN ('transactionid', 'tuple')`, db.name)
			if err != nil {
				continue // the server may be restarting
			}
			cur := map[int32]int{}
			for rows.Next() {
				var pid int32
				var waiter, bstate, bquery string
				if rows.Scan(&pid, &waiter, &bstate, &bquery) != nil {
					continue
				}
				i, seen := prev[pid]
				switch {
				case !seen:
					cur[pid] = -1
				case i < 0:
					w := lockWait{pid: pid, waiter: firstLine(waiter), samples: 2}
					w.blame(bstate, bquery)
					s.mu.Lock()
					cur[pid] = len(s.waits)
					s.waits = append(s.waits, w)
					s.mu.Unlock()
				default:
					s.mu.Lock()
					s.waits[i].samples++
					if bstate != "" {
						s.waits[i].blame(bstate, bquery)
					}
					s.mu.Unlock()
					cur[pid] = i
				}
			}
			rows.Close()
			prev = cur
		}
	}()
	return s
}

// stop ends sampling and returns the waits seen in two samples in a row.
func (s *lockSampler) stop() []lockWait {
	s.cancel()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waits
}
