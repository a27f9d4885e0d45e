package listener_test

import (
	"context"
	"log"

	"github.com/fila-run/fila/listener"
)

// A claimer waits for Ready, scans once, then scans again on every wake; the
// safety poll (not shown) covers whatever a wake source misses.
func ExampleListener() {
	l, err := listener.New(listener.Config{
		DSN:    "postgres://postgres@127.0.0.1:5432/app", // direct, never a transaction-mode pooler
		Queues: []string{"default", "mail"},
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		if err := l.Run(ctx); err != nil {
			log.Fatal(err) // a pooler in the way, or an unusable DSN
		}
	}()

	claim := func() { /* claim from the head of the queues until empty */ }
	<-l.Ready()
	claim()
	for {
		select {
		case <-l.Wakes():
			claim()
		case <-ctx.Done():
			return
		}
	}
}
