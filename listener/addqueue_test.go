package listener

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A queue added to a connected listener is listened on the live
// connection: its queue is woken once the LISTEN is confirmed, then by its
// jobs' notifications, with the job's id as its hint. A removed queue is
// no longer followed; both change the connection in place (no
// reconnect), and it stays healthy: its health check asks the server what
// the connection listens on.
func TestAddQueueAndRemoveQueueWhileConnected(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	l := newListener(t, Config{DSN: db.DirectDSN, Queues: []string{"mail"}, PingInterval: PingIntervalMin})
	start(t, l)
	waitReady(t, l)
	require.Nil(t, l.WakesFor("reports"))

	listening, err := l.AddQueue("reports")
	require.NoError(t, err)
	wakes := l.WakesFor("reports")
	require.NotNil(t, wakes)
	select {
	case <-listening:
	case <-time.After(waitTimeout):
		t.Fatal("the added queue's LISTEN not confirmed")
	}
	waitQueueWake(t, wakes, "the catch-up wake after the LISTEN")
	require.Equal(t, HintMany, l.TakeHint("reports"), "the catch-up wake names no job")

	var id int64
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		"INSERT INTO fila_jobs (queue, kind) VALUES ('reports', 'r') RETURNING id").Scan(&id))
	waitQueueWake(t, wakes, "a wake for the added queue's job")
	require.Equal(t, id, l.TakeHint("reports"))

	_, err = l.AddQueue("reports")
	require.ErrorIs(t, err, ErrQueueFollowed)
	_, err = l.AddQueue("no spaces")
	require.ErrorContains(t, err, "queue name")

	require.NoError(t, l.RemoveQueue("reports"))
	require.Nil(t, l.WakesFor("reports"))
	require.ErrorIs(t, l.RemoveQueue("reports"), ErrQueueNotFollowed)
	waitFor(t, waitTimeout, "the channel unlistened", func() bool {
		return !slices.Contains(l.wantedChannels(), "fila_reports")
	})
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('mail', 'm')")
	waitQueueWake(t, l.WakesFor("mail"), "the first queue still woken")
	require.True(t, l.Healthy(), "healthy after adding and removing a queue")
	require.Zero(t, l.Stats().Reconnects, "changed on the live connection")
}

// The WAL source follows an added queue from the next transaction it
// decodes, and forgets a removed one.
func TestWALAddQueueAndRemoveQueue(t *testing.T) {
	t.Parallel()
	db := newWALDB(t)
	w := newWAL(t, WALConfig{DSN: db.DirectDSN, Queues: []string{"mail"}})
	start(t, w)
	waitReady(t, w)

	followed, err := w.AddQueue("reports")
	require.NoError(t, err)
	select {
	case <-followed:
	default:
		t.Fatal("the WAL source follows an added queue at once")
	}
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('reports', 'r')")
	waitQueueWake(t, w.WakesFor("reports"), "a wake for the added queue's job")
	_, err = w.AddQueue("reports")
	require.ErrorIs(t, err, ErrQueueFollowed)

	require.NoError(t, w.RemoveQueue("reports"))
	require.Nil(t, w.WakesFor("reports"))
	require.ErrorIs(t, w.RemoveQueue("reports"), ErrQueueNotFollowed)
	exec(t, db, "INSERT INTO fila_jobs (queue, kind) VALUES ('mail', 'm')")
	waitQueueWake(t, w.WakesFor("mail"), "the first queue still woken")
}
