package listener

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func waitQueueWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitTimeout):
		t.Fatalf("no wake: expected %s", what)
	}
}

func requireNoQueueWake(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
		t.Fatalf("unexpected wake: %s", what)
	default:
	}
}

// A notification wakes the claimers of its queue only; a (re)connect wakes
// every queue.
func TestNotificationWakesItsQueueOnly(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Queues: []string{"a", "b"}})
	require.Nil(t, l.WakesFor("not-mine"))
	start(t, l)
	waitReady(t, l)
	a, b := l.WakesFor("a"), l.WakesFor("b")
	waitQueueWake(t, a, "queue a's catch-up wake after connecting")
	waitQueueWake(t, b, "queue b's catch-up wake after connecting")

	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('a', 'k')")
	waitQueueWake(t, a, "queue a's wake for its insert")
	// A marker on b's channel, sent after a's insert, proves a's
	// notification was handled when b's arrives.
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('b', 'k')")
	waitQueueWake(t, b, "queue b's wake for its insert")
	requireNoQueueWake(t, a, "queue a was woken by queue b's insert")
}

// A job that becomes pending again by UPDATE (a retry, a rescue, an
// operator's edit) wakes a WAL source through the update trigger's logical
// message, with the insert trigger off.
func TestWALWakesOnUpdateToPending(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	exec(t, db, "ALTER TABLE fila_jobs DISABLE TRIGGER fila_jobs_notify")
	exec(t, db, `INSERT INTO fila_jobs (queue, kind, state, finished_at) VALUES ('q', 'k', 'dead', now())`)
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, Queues: []string{"q"}, StatusInterval: 200 * time.Millisecond})
	start(t, w)
	waitReady(t, w)
	q := w.WakesFor("q")
	waitQueueWake(t, q, "the catch-up wake after connecting")
	before := w.Stats().Notifications

	exec(t, db, `UPDATE fila_jobs SET state = 'pending', attempts = 0, finished_at = NULL`)
	waitQueueWake(t, q, "a wake for the job set back to pending")
	waitCaughtUp(t, db)
	require.Equal(t, before+1, w.Stats().Notifications)
}

// A source whose DSN reaches another database than the one it must reach
// refuses to run, naming both.
func TestSourcesRefuseAnotherDatabase(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	other := newDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want, err := ReadIdentity(ctx, db.Pool)
	require.NoError(t, err)
	require.Equal(t, db.Name, want.Name)
	require.NotZero(t, want.SystemID)

	l := newListener(t, Config{DSN: other.DirectDSN, Expect: want})
	err = l.Run(ctx)
	require.True(t, errors.Is(err, ErrOtherDatabase), "got %v", err)
	require.ErrorContains(t, err, other.Name)
	require.ErrorContains(t, err, db.Name)

	w := newWAL(t, WALConfig{DSN: other.DirectDSN, Expect: want})
	err = w.Run(ctx)
	require.True(t, errors.Is(err, ErrOtherDatabase), "got %v", err)

	// The right database is accepted.
	ok := newListener(t, Config{DSN: db.DirectDSN, Expect: want})
	start(t, ok)
	waitReady(t, ok)
}

// A notification names the queue's first new job of its statement: the hint
// a claimer takes is that job's id, once; after two notifications, or a
// (re)connect, it is HintMany.
func TestNotificationHintsItsJob(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Queues: []string{"a", "b"}})
	start(t, l)
	waitReady(t, l)
	a, b := l.WakesFor("a"), l.WakesFor("b")
	waitQueueWake(t, a, "queue a's catch-up wake after connecting")
	waitQueueWake(t, b, "queue b's catch-up wake after connecting")
	require.Equal(t, HintMany, l.TakeHint("a"), "a connect names no job")
	require.Equal(t, HintMany, l.TakeHint("b"), "a connect names no job")
	require.Zero(t, l.TakeHint("a"), "a hint taken twice")
	require.Zero(t, l.TakeHint("not-mine"))

	insertID := func(queue string) int64 {
		var id int64
		require.NoError(t, db.Pool.QueryRow(context.Background(),
			"INSERT INTO fila_jobs (queue, kind) VALUES ($1::text, 'k') RETURNING id", queue).Scan(&id))
		return id
	}
	id := insertID("a")
	waitQueueWake(t, a, "queue a's wake for its insert")
	require.Equal(t, id, l.TakeHint("a"))
	require.Zero(t, l.TakeHint("a"))

	// Two jobs before the claimer looks: it must read the queue's head.
	insertID("a")
	insertID("a")
	insertID("b") // handled after both of a's
	waitQueueWake(t, b, "queue b's wake for its insert")
	waitQueueWake(t, a, "queue a's wake for its inserts")
	require.Equal(t, HintMany, l.TakeHint("a"))
	require.Positive(t, l.TakeHint("b"), "queue b's one job")
}
