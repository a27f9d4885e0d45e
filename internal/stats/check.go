package stats

import (
	"fmt"
	"strings"
	"time"
)

// Thresholds are the limits Check holds a snapshot to, for cron jobs,
// monitoring agents and Kubernetes probes. A nil field is not checked; each
// limit is the largest value still fine.
type Thresholds struct {
	// MaxDead: dead jobs of every kind together.
	MaxDead *int64
	// MaxOldest: how long the oldest runnable job of any queue has waited.
	MaxOldest *time.Duration
	// MaxNotifyQueue: pg_notification_queue_usage(), 0 to 1.
	MaxNotifyQueue *float64
}

// Empty reports whether no limit is set.
func (t Thresholds) Empty() bool {
	return t.MaxDead == nil && t.MaxOldest == nil && t.MaxNotifyQueue == nil
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
		waited := time.Duration(secs * float64(time.Second)).Round(time.Millisecond)
		if waited > *t.MaxOldest {
			breaches = append(breaches, fmt.Sprintf("oldest runnable job: waited %s in queue %q > %s", waited, queue, *t.MaxOldest))
		}
		checked = append(checked, fmt.Sprintf("oldest runnable job waited %s (max %s)", waited, *t.MaxOldest))
	}
	if t.MaxNotifyQueue != nil {
		u := s.NotificationQueueUsage
		if u > *t.MaxNotifyQueue {
			breaches = append(breaches, fmt.Sprintf("notification queue usage: %.4g > %.4g", u, *t.MaxNotifyQueue))
		}
		checked = append(checked, fmt.Sprintf("notification queue usage %.4g (max %.4g)", u, *t.MaxNotifyQueue))
	}
	return breaches, strings.Join(checked, ", ")
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
