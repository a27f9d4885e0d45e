package riverimport

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

var limits = runtime.PayloadLimits{}.WithDefaults()

func aJob(state string) riverJob {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return riverJob{id: 42, state: state, attempt: 2, maxAttempts: 25, createdAt: at.Add(-time.Hour), scheduledAt: at,
		attemptedAt: &at, priority: 1, args: `{"a":1}`, kind: "email", queue: "default", metadata: `{"team":"x"}`,
		errors: []string{`{"at":"2026-03-01T11:00:00Z","attempt":1,"error":"boom","trace":""}`,
			`{"at":"2026-03-01T11:30:00Z","attempt":2,"error":"panic: nil map","trace":"main.go:12"}`}}
}

func TestMapJobRetryable(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	r := aJob(stateRetryable)
	r.priority = 4
	r.tags = []string{"a", "b"}
	f, err := mapJob(r, limits, now)
	require.NoError(t, err)
	require.Equal(t, "pending", f.state)
	require.Equal(t, r.scheduledAt, *f.runAt)
	require.EqualValues(t, 2, f.attempts)
	require.EqualValues(t, 25, f.maxAttempts)
	require.EqualValues(t, 3, f.priority, "River's 4 is Fila's 3")
	require.Equal(t, "a\x1fb", *f.tags)
	require.JSONEq(t, `{"team":"x","river_job_id":42}`, f.metadata)
	var errs []runtime.AttemptError
	require.NoError(t, json.Unmarshal([]byte(f.errors), &errs))
	require.Len(t, errs, 2)
	require.Equal(t, "boom", errs[0].Error)
	require.Equal(t, "panic: nil map\nmain.go:12", errs[1].Error, "the trace follows the error")
	require.Equal(t, 2, errs[1].Attempt)
	require.Equal(t, "panic: nil map\nmain.go:12", *f.lastError)
	require.Nil(t, f.finishedAt)
}

func TestMapJobRunning(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 13, 0, 0, 0, time.UTC)
	f, err := mapJob(aJob(stateRunning), limits, now)
	require.NoError(t, err)
	require.Equal(t, "pending", f.state)
	require.Nil(t, f.runAt, "due now, on the database's clock")
	require.EqualValues(t, 2, f.attempts, "the interrupted attempt counts")
	require.Equal(t, interruptedError, *f.lastError)

	// Out of attempts: dead, as River's rescuer would discard it.
	r := aJob(stateRunning)
	r.maxAttempts = 2
	f, err = mapJob(r, limits, now)
	require.NoError(t, err)
	require.Equal(t, "dead", f.state)
	require.Equal(t, now, *f.finishedAt)
}

func TestMapJobFinished(t *testing.T) {
	t.Parallel()
	now := time.Now()
	fin := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC)
	for state, want := range map[string]string{stateCompleted: "completed", stateCancelled: "cancelled", stateDiscarded: "dead"} {
		r := aJob(state)
		r.finalizedAt = &fin
		f, err := mapJob(r, limits, now)
		require.NoError(t, err, state)
		require.Equal(t, want, f.state)
		require.Equal(t, fin, *f.finishedAt)
		require.Nil(t, f.runAt)
	}
}

func TestMapJobKeepsTheLatestErrors(t *testing.T) {
	t.Parallel()
	r := aJob(stateRetryable)
	r.attempt, r.maxAttempts = 30, 40
	r.errors = nil
	for i := 1; i <= 30; i++ {
		r.errors = append(r.errors, `{"at":"2026-03-01T11:00:00Z","attempt":`+strconv.Itoa(i)+`,"error":"e"}`)
	}
	f, err := mapJob(r, limits, time.Now())
	require.NoError(t, err)
	var errs []runtime.AttemptError
	require.NoError(t, json.Unmarshal([]byte(f.errors), &errs))
	require.Len(t, errs, errorsKept)
	require.Equal(t, 11, errs[0].Attempt)
	require.Equal(t, 30, errs[errorsKept-1].Attempt)
}

// What Fila cannot hold is refused, naming why.
func TestMapJobRefuses(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		edit func(*riverJob)
		want string
	}{
		"queue":        {func(r *riverJob) { r.queue = "with space" }, `queue "with space"`},
		"max attempts": {func(r *riverJob) { r.maxAttempts = 2000 }, "max attempts 2000 out of Fila's range"},
		"attempt left": {func(r *riverJob) { r.attempt = 25 }, "only while it has an attempt left"},
		"tags":         {func(r *riverJob) { r.tags = []string{strings.Repeat("t", 101)} }, "1 to 100 characters"},
		"metadata":     {func(r *riverJob) { r.metadata = `[1]` }, "metadata is not a JSON object"},
		"big metadata": {func(r *riverJob) { r.metadata = `{"x":"` + strings.Repeat("m", 17000) + `"}` }, "at most 16384"},
		"errors":       {func(r *riverJob) { r.errors = []string{`"text"`} }, "error 1 of its history"},
		"payload":      {func(r *riverJob) { r.args = `{"x":"` + strings.Repeat("p", 1<<20) + `"}` }, "args"},
		"pending":      {func(r *riverJob) { r.state = statePending }, `state "pending" does not move`},
	}
	for name, c := range cases {
		r := aJob(stateAvailable)
		c.edit(&r)
		_, err := mapJob(r, limits, time.Now())
		require.ErrorContains(t, err, c.want, name)
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.WithDefaults().Validate())
	require.ErrorContains(t, Config{BatchSize: BatchSizeMax + 1}.Validate(), "batch size 10001 out of range")
	require.ErrorContains(t, Config{BatchSize: 1, DryRun: true, Delete: true}.Validate(), "not both")
}
