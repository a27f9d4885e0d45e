package signup_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/examples/signup"
	"github.com/fila-run/fila/filatest"
	"github.com/fila-run/fila/runtime"
)

type sent struct{ to, subject, key string }

type fakeMailer struct {
	sent []sent
	err  error
}

func (m *fakeMailer) Send(_ context.Context, to, subject, key string) error {
	if m.err != nil {
		return m.err
	}
	m.sent = append(m.sent, sent{to, subject, key})
	return nil
}

func newTx(t *testing.T) (*filatest.DB, *runtime.Client, context.Context) {
	db := filatest.NewDB(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, signup.CreateUsersSQL)
	require.NoError(t, err)
	return db, runtime.NewClient(db.Pool), ctx
}

func TestSignupEnqueuesTheWelcomeInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := filatest.NewDB(t) // a migrated database of this test's own (TEST_DATABASE_URL)
	_, err := db.Pool.Exec(ctx, signup.CreateUsersSQL)
	require.NoError(t, err)
	tx := db.Tx(t) // rolled back when the test ends
	id, err := signup.Signup(ctx, tx, runtime.NewClient(db.Pool), "ana@example.com")
	require.NoError(t, err)

	job := filatest.RequireInsertedTx[signup.SendWelcome](ctx, t, tx, &filatest.RequireOpts{Queue: "mail", MaxAttempts: 10})
	require.Equal(t, signup.SendWelcome{UserID: id, Email: "ana@example.com"}, job.Args)
	filatest.RequireNotInsertedTx[signup.SendWelcome](ctx, t, db.Pool) // not before tx commits

	mailer := &fakeMailer{}
	res := filatest.NewWorker(t, signup.WelcomeKind(mailer)).WorkJobTx(ctx, t, tx, job.Row.ID)
	require.Equal(t, runtime.OutcomeCompleted, res.Outcome) // res.Err, res.Job (the row, output included)
	require.Len(t, mailer.sent, 1)
}

func TestWelcomeIsSentOnceWithAStableKey(t *testing.T) {
	t.Parallel()
	db, _, ctx := newTx(t)
	m := &fakeMailer{}
	w := filatest.NewWorker(t, signup.WelcomeKind(m))
	tx := db.Tx(t)
	res := w.WorkTx(ctx, t, tx, signup.SendWelcome{UserID: 7, Email: "bo@example.com"}, nil)
	require.NoError(t, res.Err)
	require.Equal(t, runtime.OutcomeCompleted, res.Outcome)
	require.JSONEq(t, `{"sent_to": "bo@example.com"}`, string(res.Job.Output))
	require.Equal(t, []sent{{"bo@example.com", "Welcome!", "fila-job-" + strconv.FormatInt(res.Job.ID, 10)}}, m.sent)
}

func TestRateLimitedWelcomeRetriesWhenTheMailerSays(t *testing.T) {
	t.Parallel()
	db, _, ctx := newTx(t)
	w := filatest.NewWorker(t, signup.WelcomeKind(&fakeMailer{err: signup.RateLimited{After: 10 * time.Minute}}))
	tx := db.Tx(t)
	res := w.WorkTx(ctx, t, tx, signup.SendWelcome{UserID: 8, Email: "cy@example.com"}, nil)
	require.ErrorIs(t, res.Err, signup.ErrRateLimited)
	require.Equal(t, runtime.OutcomeRetried, res.Outcome)
	require.Equal(t, "pending", res.Job.State)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), res.Job.RunAt, time.Minute)
}
