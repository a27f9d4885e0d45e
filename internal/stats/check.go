package stats

import (
	"fmt"
	"strings"
	"time"

	"github.com/fila-run/fila/internal/duration"
)

// Thresholds are the limits Check holds a snapshot to, for cron jobs,
// monitoring agents and Kubernetes probes. A nil field is not checked; each
// limit is the largest value still fine.
type Thresholds struct {
	// MaxDead: dead jobs of every kind together.
	MaxDead *int64
	// MaxOldest: how long the oldest runnable job of any queue that is not
	// paused has waited.
	MaxOldest *time.Duration
	// MaxNotifyQueue: pg_notification_queue_usage(), 0 to 1.
	MaxNotifyQueue *float64
	// MaxUnhandled: pending jobs that no live worker of their queue
	// handles, all kinds together.
	MaxUnhandled *int64
	// MaxOrphanedTasks: recurring tasks no live worker schedules.
	MaxOrphanedTasks *int64
	// MaxPaused: how long any queue may have been paused.
	MaxPaused *time.Duration
}

// Empty reports whether no limit is set.
func (t Thresholds) Empty() bool {
	return t.MaxDead == nil && t.MaxOldest == nil && t.MaxNotifyQueue == nil &&
		t.MaxUnhandled == nil && t.MaxOrphanedTasks == nil && t.MaxPaused == nil
}

// Check returns one line per breached threshold, and one line that sums up
// what was checked.
func (s *Snapshot) Check(t Thresholds) (breaches []string, summary string) {
	breaches = []string{}
	var checked []string
	if t.MaxDead != nil {
		dead := s.DeadJobs()
		if dead > *t.MaxDead {
			breaches = append(breaches, fmt.Sprintf("dead jobs: %d > %d (%s)", dead, *t.MaxDead, s.deadKinds(3)))
		}
		checked = append(checked, fmt.Sprintf("dead jobs %d (max %d)", dead, *t.MaxDead))
	}
	if t.MaxOldest != nil {
		queue, secs := s.OldestRunnable()
		waited := time.Duration(secs * float64(time.Second))
		if waited > *t.MaxOldest {
			breaches = append(breaches, fmt.Sprintf("oldest runnable job: waited %s in queue %q > %s",
				duration.Format(waited), queue, duration.Format(*t.MaxOldest)))
		}
		line := fmt.Sprintf("oldest runnable job waited %s (max %s", duration.Format(waited), duration.Format(*t.MaxOldest))
		if paused := s.Paused(); len(paused) > 0 {
			names := make([]string, len(paused))
			for i, q := range paused {
				names[i] = q.Queue
			}
			line += "; paused queues left out: " + strings.Join(names, " ")
		}
		checked = append(checked, line+")")
	}
	if t.MaxNotifyQueue != nil {
		u := s.NotificationQueueUsage
		if u > *t.MaxNotifyQueue {
			breaches = append(breaches, fmt.Sprintf("notification queue usage: %.4g > %.4g", u, *t.MaxNotifyQueue))
		}
		checked = append(checked, fmt.Sprintf("notification queue usage %.4g (max %.4g)", u, *t.MaxNotifyQueue))
	}
	if t.MaxUnhandled != nil {
		n := s.UnhandledJobs()
		if n > *t.MaxUnhandled {
			breaches = append(breaches, fmt.Sprintf("pending jobs no live worker handles: %d > %d (%s)", n, *t.MaxUnhandled, s.unhandledKinds(3)))
		}
		checked = append(checked, fmt.Sprintf("pending jobs no live worker handles %d (max %d)", n, *t.MaxUnhandled))
	}
	if t.MaxOrphanedTasks != nil {
		n := int64(len(s.OrphanedTasks))
		if n > *t.MaxOrphanedTasks {
			names := make([]string, 0, 3)
			for i, o := range s.OrphanedTasks {
				if i == 3 {
					names = append(names, fmt.Sprintf("%d more", len(s.OrphanedTasks)-3))
					break
				}
				names = append(names, fmt.Sprintf("%q", o.Task))
			}
			breaches = append(breaches, fmt.Sprintf("recurring tasks no live worker schedules: %d > %d (%s)", n, *t.MaxOrphanedTasks, strings.Join(names, ", ")))
		}
		checked = append(checked, fmt.Sprintf("recurring tasks no live worker schedules %d (max %d)", n, *t.MaxOrphanedTasks))
	}
	if t.MaxPaused != nil {
		var longest time.Duration
		for _, q := range s.Paused() {
			d := time.Duration(q.PausedSeconds * float64(time.Second)).Round(time.Second)
			longest = max(longest, d)
			if d > *t.MaxPaused {
				breaches = append(breaches, fmt.Sprintf("queue %q: paused for %s > %s", q.Queue, d, *t.MaxPaused))
			}
		}
		checked = append(checked, fmt.Sprintf("longest pause %s (max %s)", longest, *t.MaxPaused))
	}
	return breaches, strings.Join(checked, ", ")
}

// unhandledKinds names the kinds and queues with the most pending jobs no
// live worker handles, at most n of them.
func (s *Snapshot) unhandledKinds(n int) string {
	var parts []string
	for i, u := range s.Unhandled {
		if i == n {
			parts = append(parts, fmt.Sprintf("%d more", len(s.Unhandled)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%q on %s %d", u.Kind, u.Queue, u.Pending))
	}
	return strings.Join(parts, ", ")
}

// deadKinds names the kinds with the most dead jobs, at most n of them,
// quoted: a kind written by hand may hold any character, and a breach is one
// line.
func (s *Snapshot) deadKinds(n int) string {
	var parts []string
	for i, d := range s.Dead {
		if i == n {
			parts = append(parts, fmt.Sprintf("%d more", len(s.Dead)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("%q %d", d.Kind, d.Dead))
	}
	return strings.Join(parts, ", ")
}
