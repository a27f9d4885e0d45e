package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// TestRetryRunsCompletedAndScheduledJobs: Retry takes any job that is not
// running, as River's JobRetry does. A completed job runs again; a job
// scheduled an hour ahead runs now, on a running runtime whose safety poll
// is 10 minutes away, so only the wake-up of the retry can make it run;
// a running job is skipped with its reason, and a completed job of a
// sequence is refused because the sequence went on past it.
func TestRetryRunsCompletedAndScheduledJobs(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var runs [3]atomic.Int32 // by payload n
	block := make(chan struct{})
	started := make(chan struct{}, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "count", Handler: func(ctx context.Context, j *runtime.Job) error {
		var p struct{ N int }
		if err := j.Decode(&p); err != nil {
			return err
		}
		runs[p.N].Add(1)
		if p.N == 2 {
			started <- struct{}{}
			select {
			case <-block:
			case <-ctx.Done():
			}
		}
		return nil
	}}))

	completed, err := runtime.Insert(ctx, db.Pool, "count", map[string]int{"n": 0}, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "first run completed", func() bool { s, _, _ := jobState(t, db, completed); return s == "completed" })
	scheduled, err := runtime.Insert(ctx, db.Pool, "count", map[string]int{"n": 1}, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	running, err := runtime.Insert(ctx, db.Pool, "count", map[string]int{"n": 2}, nil)
	require.NoError(t, err)
	<-started
	defer close(block)

	res, err := runtime.Retry(ctx, db.Pool, completed, scheduled, running)
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: completed, From: "completed"}, {ID: scheduled, From: "pending"}}, res.Changed)
	require.Len(t, res.Skipped, 1)
	require.Equal(t, running, res.Skipped[0].ID)
	require.Equal(t, "running", res.Skipped[0].State)
	require.Contains(t, res.Skipped[0].Reason, "is running")

	waitFor(t, 10*time.Second, "the completed job ran again", func() bool { return runs[0].Load() == 2 })
	waitFor(t, 10*time.Second, "the scheduled job ran now", func() bool { return runs[1].Load() == 1 })
	waitFor(t, 10*time.Second, "both completed", func() bool {
		a, _, _ := jobState(t, db, completed)
		b, _, _ := jobState(t, db, scheduled)
		return a == "completed" && b == "completed"
	})
	_, attempts, _ := jobState(t, db, completed)
	require.Equal(t, 1, attempts, "a retried completed job counts its attempts from 0 again")

	// The completed first job of a sequence: the job after it went on.
	first, err := runtime.Insert(ctx, db.Pool, "count", map[string]int{"n": 0}, &runtime.InsertOpts{Sequence: "s"})
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "sequence job completed", func() bool { s, _, _ := jobState(t, db, first); return s == "completed" })
	res, err = runtime.Retry(ctx, db.Pool, first)
	require.NoError(t, err)
	require.Empty(t, res.Changed)
	require.Len(t, res.Skipped, 1)
	require.Contains(t, res.Skipped[0].Reason, "completed job of sequence s")

	// RetryWhere takes completed and scheduled jobs by state too.
	later, err := runtime.Insert(ctx, db.Pool, "count", map[string]int{"n": 1}, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	res, err = runtime.RetryWhere(ctx, db.Pool, runtime.JobFilter{State: runtime.StateScheduled})
	require.NoError(t, err)
	require.Equal(t, []runtime.JobChange{{ID: later, From: "pending"}}, res.Changed)
	waitFor(t, 10*time.Second, "the scheduled job retried by state ran", func() bool { return runs[1].Load() == 2 })
}
