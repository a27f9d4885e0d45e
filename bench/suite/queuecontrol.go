package suite

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fila-run/fila/internal/pgconfig"
)

// controlChannel is what the control listens on; nothing notifies it.
const controlChannel = "fila_bench_idle_control"

// queueControl tells what a notify worker's listener pays for other
// databases' NOTIFY traffic. The server keeps one notification queue for
// all its databases, and a listening backend that falls a few pages behind
// it is signalled to read past what others queued, in a transaction of its
// own database. On a shared server an idle notify worker's database so
// counts transactions for traffic that is not its own (up to 14 a second
// were seen while other tests ran). The control is a bare LISTEN in a
// database of its own: it listens over the window, and what it ran beyond
// connecting and listening is those reads.
type queueControl struct {
	s     *suite
	db    *database
	fixed int64 // transactions of connecting, listening and closing once
	base  int64 // the database's count before the window
	conn  *pgx.Conn
	// listenedAt is when the current LISTEN began, and listened how long
	// the last one lasted: reads accrue with time listened, and each
	// worker's window is its own length.
	listenedAt time.Time
	listened   time.Duration
}

// prepare measures the control's fixed cost: one connection that listens
// and closes at once.
func (c *queueControl) prepare(ctx context.Context) error {
	before, err := c.s.exitedTransactions(ctx, c.db.name)
	if err != nil {
		return err
	}
	if err := c.listen(ctx); err != nil {
		return err
	}
	if err := c.stop(ctx); err != nil {
		return err
	}
	if c.base, err = c.s.exitedTransactions(ctx, c.db.name); err != nil {
		return err
	}
	c.fixed = c.base - before
	return nil
}

// listen connects and listens, until stop.
func (c *queueControl) listen(ctx context.Context) error {
	cfg, err := pgconfig.Conn(c.db.dsn)
	if err != nil {
		return err
	}
	if c.conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return fmt.Errorf("idle control: connect to %s: %w", c.db.name, err)
	}
	if _, err := c.conn.Exec(ctx, "LISTEN "+controlChannel); err != nil {
		return fmt.Errorf("idle control: listen: %w", err)
	}
	c.listenedAt = time.Now()
	return nil
}

// stop closes the listening connection.
func (c *queueControl) stop(ctx context.Context) error {
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close(context.WithoutCancel(ctx))
	c.listened = time.Since(c.listenedAt)
	c.conn = nil
	return err
}

// queueReads stops listening and returns the transactions the control ran
// since base beyond its fixed cost (its reads of other databases' traffic),
// and how long it listened for them.
func (c *queueControl) queueReads(ctx context.Context) (int64, time.Duration, error) {
	if err := c.stop(ctx); err != nil {
		return 0, 0, err
	}
	n, err := c.s.exitedTransactions(ctx, c.db.name)
	if err != nil {
		return 0, 0, err
	}
	return max(0, n-c.base-c.fixed), c.listened, nil
}
