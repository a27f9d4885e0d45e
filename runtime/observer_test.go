package runtime_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// recordingObserver keeps what a runtime tells it.
type recordingObserver struct {
	mu       sync.Mutex
	wakes    map[runtime.WakeReason]int
	claimed  int
	waits    []time.Duration
	outcomes map[string]runtime.Outcome // kind -> outcome
	ran      map[string]time.Duration
}

func newRecordingObserver() *recordingObserver {
	return &recordingObserver{wakes: map[runtime.WakeReason]int{}, outcomes: map[string]runtime.Outcome{},
		ran: map[string]time.Duration{}}
}

func (o *recordingObserver) Woken(queue string, reason runtime.WakeReason) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.wakes[reason]++
}

func (o *recordingObserver) Claimed(queue string, jobs []*runtime.Job, rescued int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.claimed += len(jobs)
	for _, j := range jobs {
		o.waits = append(o.waits, j.Wait)
	}
}

func (o *recordingObserver) Finished(job *runtime.Job, outcome runtime.Outcome, ran time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.outcomes[job.Kind] = outcome
	o.ran[job.Kind] = ran
}

// The observer hears of every wake, claim and outcome, with each job's
// pickup latency and run time.
func TestObserverSeesWakesClaimsAndOutcomes(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	obs := newRecordingObserver()
	cfg := baseConfig(t, db,
		runtime.Kind{Name: "ok", Handler: func(context.Context, *runtime.Job) error {
			time.Sleep(20 * time.Millisecond)
			return nil
		}},
		runtime.Kind{Name: "fails", Handler: func(context.Context, *runtime.Job) error { return errors.New("no") }},
		runtime.Kind{Name: "perm", Handler: func(context.Context, *runtime.Job) error {
			return runtime.Permanent(errors.New("never"))
		}},
	)
	cfg.Observer = obs
	// A retry due well after the notification of its update: claimed on the
	// timer that notification's claim sets.
	cfg.RetryBase, cfg.RetryMax = 500*time.Millisecond, 500*time.Millisecond
	rt := start(t, cfg)
	require.NoError(t, rt.CheckReady(ctx))
	_, err := runtime.Insert(ctx, db.Pool, "ok", nil, nil)
	require.NoError(t, err)
	_, err = runtime.Insert(ctx, db.Pool, "fails", nil, &runtime.InsertOpts{MaxAttempts: 2})
	require.NoError(t, err)
	_, err = runtime.Insert(ctx, db.Pool, "perm", nil, nil)
	require.NoError(t, err)
	waitFor(t, 10*time.Second, "all settled", func() bool {
		return countState(t, db, "completed") == 1 && countState(t, db, "dead") == 2
	})
	waitFor(t, 5*time.Second, "the last outcome observed", func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return obs.outcomes["fails"] == runtime.OutcomeDead
	})
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Equal(t, runtime.OutcomeCompleted, obs.outcomes["ok"])
	require.Equal(t, runtime.OutcomeDead, obs.outcomes["perm"])
	require.GreaterOrEqual(t, obs.ran["ok"], 20*time.Millisecond)
	require.Equal(t, 4, obs.claimed, "three jobs, one of them twice")
	require.Positive(t, obs.wakes[runtime.WakeNotify], "inserts woke the producer by NOTIFY")
	require.Positive(t, obs.wakes[runtime.WakeTimer], "the retry was claimed on its timer")
	for _, w := range obs.waits {
		require.GreaterOrEqual(t, w, time.Duration(0))
		require.Less(t, w, 10*time.Second)
	}
}
