package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

func ptr[T any](v T) *T { return &v }

// TestUpdateJobChangesEachField: every field of a pending job changes, the
// job's own policy stays, bad values are refused as an insert refuses
// them, and a running job is refused.
func TestUpdateJobChangesEachField(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	id, err := runtime.Insert(ctx, db.Pool, "mail", nil, &runtime.InsertOpts{
		RunAt: time.Now().Add(time.Hour), Tags: []string{"old"}, Metadata: map[string]any{"tenant": "acme"},
		Timeout: 3 * time.Second,
	})
	require.NoError(t, err)

	runAt := time.Now().Add(2 * time.Hour).Truncate(time.Microsecond)
	j, err := runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{
		Priority: ptr[int16](-4), RunAt: &runAt, Tags: &[]string{"a", "b"},
		Metadata: &map[string]any{"tenant": "zeta"}, MaxAttempts: ptr(9),
	})
	require.NoError(t, err)
	require.Equal(t, "pending", j.State)
	require.EqualValues(t, -4, j.Priority)
	require.True(t, runAt.Equal(j.RunAt), "%s vs %s", runAt, j.RunAt)
	require.Equal(t, []string{"a", "b"}, j.Tags)
	require.Equal(t, 9, j.MaxAttempts)
	var md map[string]any
	require.NoError(t, json.Unmarshal(j.Metadata, &md))
	require.Equal(t, map[string]any{"tenant": "zeta"}, md, "the metadata given, nothing else")
	require.JSONEq(t, `{"timeout_ms": 3000}`, string(j.Policy), "the job's own timeout stays")

	// The key "fila" is the user's like any other.
	j, err = runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{Metadata: &map[string]any{"fila": 1}})
	require.NoError(t, err)
	require.JSONEq(t, `{"fila": 1}`, string(j.Metadata))
	require.JSONEq(t, `{"timeout_ms": 3000}`, string(j.Policy))

	// Only what is given changes.
	j, err = runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{Priority: ptr[int16](2)})
	require.NoError(t, err)
	require.EqualValues(t, 2, j.Priority)
	require.Equal(t, []string{"a", "b"}, j.Tags)
	require.Equal(t, 9, j.MaxAttempts)
	require.True(t, runAt.Equal(j.RunAt))
	j, err = runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{Tags: &[]string{}})
	require.NoError(t, err)
	require.Empty(t, j.Tags)

	for _, bad := range []struct {
		u    runtime.JobUpdate
		want string
	}{
		{runtime.JobUpdate{MaxAttempts: ptr(0)}, "max attempts 0 out of range"},
		{runtime.JobUpdate{Tags: &[]string{""}}, "tag \"\""},
		{runtime.JobUpdate{Metadata: &map[string]any{"big": strings.Repeat("x", runtime.MetadataMaxBytes)}}, "at most"},
	} {
		_, err := runtime.UpdateJob(ctx, db.Pool, id, bad.u)
		require.ErrorContains(t, err, bad.want)
	}
	_, err = runtime.UpdateJob(ctx, db.Pool, id+1000, runtime.JobUpdate{Priority: ptr[int16](1)})
	require.True(t, errors.Is(err, runtime.ErrJobNotFound), "%v", err)

	dead := seedJobInState(t, db, "mail", "default", "dead") // 3 attempts made
	_, err = runtime.UpdateJob(ctx, db.Pool, dead, runtime.JobUpdate{MaxAttempts: ptr(2)})
	require.ErrorContains(t, err, "max attempts 2 is not above the attempts the job has made")

	running := seedJobInState(t, db, "mail", "default", "running")
	_, err = runtime.UpdateJob(ctx, db.Pool, running, runtime.JobUpdate{Priority: ptr[int16](1)})
	require.True(t, errors.Is(err, runtime.ErrJobRunning), "%v", err)
	require.ErrorContains(t, err, "cancel it first")
	r, err := runtime.GetJob(ctx, db.Pool, running)
	require.NoError(t, err)
	require.EqualValues(t, 0, r.Priority, "a running job is not changed")
}

// TestUpdatedToRunNowIsPickedUp: a job scheduled an hour ahead, updated to
// run now, is run by a running runtime whose safety poll is 10 minutes
// away: the update itself wakes it.
func TestUpdatedToRunNowIsPickedUp(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	ran := make(chan int64, 1)
	start(t, baseConfig(t, db, runtime.Kind{Name: "later", Handler: func(ctx context.Context, j *runtime.Job) error {
		ran <- j.ID
		return nil
	}}))
	id, err := runtime.Insert(ctx, db.Pool, "later", nil, &runtime.InsertOpts{RunAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{RunAt: &time.Time{}})
	require.NoError(t, err)
	select {
	case got := <-ran:
		require.Equal(t, id, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the job updated to run now did not run within 10 s (the safety poll is 10 minutes)")
	}
}

// TestUpdateJobMovesAnOlderVersionsPolicy: a job inserted by a version
// before the policy column carries its policy in its metadata; replacing
// that metadata moves the policy to the column rather than dropping it.
func TestUpdateJobMovesAnOlderVersionsPolicy(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var id int64
	require.NoError(t, db.Pool.QueryRow(ctx, `INSERT INTO fila_jobs (kind, metadata, run_at)
		VALUES ('mail', '{"fila": {"timeout_ms": 130}, "a": 1}', now() + interval '1 hour') RETURNING id`).Scan(&id))
	j, err := runtime.UpdateJob(ctx, db.Pool, id, runtime.JobUpdate{Metadata: &map[string]any{"b": 2}})
	require.NoError(t, err)
	require.JSONEq(t, `{"b": 2}`, string(j.Metadata))
	require.JSONEq(t, `{"timeout_ms": 130}`, string(j.Policy))
	var policy string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT policy::text FROM fila_jobs WHERE id = $1::bigint`, id).Scan(&policy))
	require.JSONEq(t, `{"timeout_ms": 130}`, policy, "in the column")
}
