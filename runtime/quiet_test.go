package runtime_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/testwait"
	"github.com/fila-run/fila/runtime"
)

// Producers notify only while a worker sleeps, and workers stop sleeping
// under load (migration 0005). This hunts for a lost wake-up at the
// transitions: rounds of bursts from concurrent producers, some holding
// their transaction open a while after the insert, big enough to make the
// workers poll and small enough to let them sleep; each round ends with
// one insert left uncommitted while the workers, dry, try to sleep, and a
// pause with no insert at all. The safety poll is 10 minutes, so a job whose
// wake-up was lost would still be pending when its round ends. (With the
// producers' lock left out of the trigger and fila_sleep, this test fails.)
func TestQuietNotifyLosesNoWakeUp(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		cfg := baseConfig(t, db, runtime.Kind{Name: "k", Handler: noop})
		cfg.Concurrency = 20
		cfg.BusyRate = 20 // reached by this machine's producers, under the race detector too
		start(t, cfg)
	}
	var polled atomic.Bool // some worker stopped sleeping at some point
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stopSampling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var asleep int
			if db.Pool.QueryRow(ctx, `SELECT count(*) FROM fila_sleepers`).Scan(&asleep) == nil && asleep < 3 {
				polled.Store(true)
			}
		}
	}()
	const rounds = 24
	total := 0
	for round := 0; round < rounds; round++ {
		// Burst sizes from a handful (the workers stay asleep) to several
		// hundred a second (they poll).
		perProducer := []int{1, 3, 60, 150}[round%4] + rand.IntN(5)
		var wg sync.WaitGroup
		for p := 0; p < 8; p++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < perProducer; i++ {
					tx, err := db.Pool.Begin(ctx)
					if err != nil {
						t.Error(err)
						return
					}
					if _, err := tx.Exec(ctx, `INSERT INTO fila_jobs (kind) VALUES ('k')`); err != nil {
						t.Error(err)
						_ = tx.Rollback(ctx)
						return
					}
					if rand.IntN(10) == 0 {
						time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond) // a producer slow to commit
					}
					if err := tx.Commit(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		// The last insert of the round stays uncommitted a while, so the
		// workers, dry, try to sleep while it is in flight: its commit must
		// still wake one.
		wg.Add(1)
		go func() {
			defer wg.Done()
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			defer func() { _ = tx.Rollback(ctx) }()
			if _, err := tx.Exec(ctx, `INSERT INTO fila_jobs (kind) VALUES ('k')`); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Duration(20+rand.IntN(300)) * time.Millisecond)
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
		}()
		wg.Wait()
		total += 8*perProducer + 1
		// Nothing is inserted now: a job whose wake-up was lost stays
		// pending until the safety poll, ten minutes away.
		if !testwait.For(10*time.Second, func() bool { return countState(t, db, "completed") >= total }) {
			var pending []int64
			rows, err := db.Pool.Query(ctx, `SELECT id FROM fila_jobs WHERE state <> 'completed' ORDER BY id`)
			require.NoError(t, err)
			for rows.Next() {
				var id int64
				require.NoError(t, rows.Scan(&id))
				pending = append(pending, id)
			}
			t.Fatalf("round %d: jobs %v not picked up within 10s of the last insert: a lost wake-up", round, pending)
		}
	}
	close(stopSampling)
	<-sampled
	require.True(t, polled.Load(), "no worker ever stopped sleeping: the test did not reach the transitions")
	t.Logf("%d jobs in %d rounds, none lost", total, rounds)
}
