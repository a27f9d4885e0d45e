package listener

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
)

const (
	// sqlBackendPID is compared with the pid in the connection's key data to
	// find a pooler in the way.
	sqlBackendPID = `SELECT pg_backend_pid()`
	// sqlListeningChannels pings the server and proves the LISTENs are still
	// in place in one round trip.
	sqlListeningChannels = `SELECT array(SELECT pg_listening_channels())`
)

// Listener is the NOTIFY wake source: one dedicated connection straight to
// PostgreSQL that LISTENs on the queues' channels. It never opens a
// transaction (a listener inside a transaction holds back the notification
// queue for the whole instance) and never waits on its consumers.
type Listener struct {
	*state
	cfg Config

	subMu sync.Mutex // guards the fields below
	// channels are the channels the listener must LISTEN on: the queues'
	// given to New and those AddQueue added since.
	channels []string
	// confirmed holds, per channel added while running, what AddQueue
	// returned: closed once the connection listens on it.
	confirmed map[string]chan struct{}
	// interrupt cuts the current wait for a notification short, so serve
	// runs the LISTEN or UNLISTEN a change of channels needs; nil while
	// serve is not waiting.
	interrupt context.CancelCauseFunc
}

var _ Source = (*Listener)(nil)

// New returns a Listener for cfg (defaults applied), or the error Validate
// finds. It does not connect; Run does.
func New(cfg Config) (*Listener, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	chs, err := channels(cfg.Schema, cfg.Queues)
	if err != nil {
		return nil, fmt.Errorf("listener: Queues: %w", err)
	}
	return &Listener{
		state:     newState(cfg.Logger.Named("listener"), cfg.Queues),
		cfg:       cfg,
		channels:  chs,
		confirmed: map[string]chan struct{}{},
	}, nil
}

// errResubscribe is the cause of a wait cut short by AddQueue or
// RemoveQueue.
var errResubscribe = errors.New("listener: channels changed")

// AddQueue listens on one more queue's channel. The channel returned is
// closed once the connection listens on it (and the queue has been woken, so
// its claimer scans for anything committed before): a job committed after
// that is announced by its notification. While the listener is not
// connected, it LISTENs on the channel when it connects.
func (l *Listener) AddQueue(queue string) (<-chan struct{}, error) {
	ch, err := channel.ForQueueIn(l.cfg.Schema, queue)
	if err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	if err := l.addQueue(queue); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.channels = append(l.channels, ch)
	l.confirmed[ch] = done
	if l.interrupt != nil {
		l.interrupt(errResubscribe)
	}
	return done, nil
}

// RemoveQueue stops listening on queue's channel; the listener UNLISTENs at
// once if connected.
func (l *Listener) RemoveQueue(queue string) error {
	ch, err := channel.ForQueueIn(l.cfg.Schema, queue)
	if err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	if err := l.removeQueue(queue); err != nil {
		return err
	}
	l.subMu.Lock()
	defer l.subMu.Unlock()
	l.channels = slices.DeleteFunc(l.channels, func(c string) bool { return c == ch })
	delete(l.confirmed, ch)
	if l.interrupt != nil {
		l.interrupt(errResubscribe)
	}
	return nil
}

// wantedChannels is a copy of the channels the listener must listen on.
func (l *Listener) wantedChannels() []string {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	return slices.Clone(l.channels)
}

// Wakes is signalled, coalescing, on each notification and after every
// (re)connect.
func (l *Listener) Wakes() <-chan struct{} { return l.wakes }

// Ready is closed once the first LISTEN on every channel is confirmed.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Healthy reports whether the listener is connected, listening on all its
// channels, and its last ping was answered.
func (l *Listener) Healthy() bool { return l.healthy.Load() }

// HealthChanges is signalled, coalescing, whenever Healthy flips.
func (l *Listener) HealthChanges() <-chan struct{} { return l.healthChanges }

// Stats returns the listener's counters.
func (l *Listener) Stats() Stats { return l.stats() }

// Run listens until ctx is cancelled, reconnecting with backoff whenever the
// connection is lost. It returns nil on cancellation, and an error only when
// the DSN cannot be used: it does not parse, or it leads to a pooler.
func (l *Listener) Run(ctx context.Context) error {
	connCfg, err := l.connConfig()
	if err != nil {
		return err
	}
	return l.loop(ctx, l.cfg.ReconnectMax, func(ctx context.Context) (session, error) {
		return l.connect(ctx, connCfg)
	})
}

// connConfig is the DSN's connection settings with the listener's defaults.
func (l *Listener) connConfig() (*pgx.ConnConfig, error) {
	connCfg, err := pgconfig.Conn(l.cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("listener: DSN: %w", err)
	}
	if _, ok := connCfg.RuntimeParams["application_name"]; !ok {
		connCfg.RuntimeParams["application_name"] = ApplicationName
	}
	if connCfg.ConnectTimeout == 0 {
		connCfg.ConnectTimeout = connectTimeoutDefault
	}
	ownStatementTimeout(&connCfg.Config)
	return connCfg, nil
}

// connect opens the connection, makes sure it reaches PostgreSQL itself, and
// LISTENs on every channel, confirming each with pg_listening_channels.
func (l *Listener) connect(ctx context.Context, connCfg *pgx.ConnConfig) (session, error) {
	conn, err := connectLifted(ctx, connCfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			closeConn(conn)
		}
	}()

	if err := checkDirect(ctx, conn, l.cfg.PingTimeout, listenPoolerAdvice); err != nil {
		return nil, err
	}
	if err := checkIdentity(ctx, conn, l.cfg.PingTimeout, l.cfg.Expect); err != nil {
		return nil, err
	}
	if err := checkPrimary(ctx, conn, l.cfg.PingTimeout); err != nil {
		return nil, err
	}
	if err := liftIdleSessionTimeout(ctx, conn, l.cfg.PingTimeout); err != nil {
		return nil, err
	}
	listening := l.wantedChannels()
	for _, ch := range listening {
		if err := l.exec(ctx, conn, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return nil, fmt.Errorf("listen on %s: %w", ch, err)
		}
	}
	if err := l.check(ctx, conn, listening); err != nil {
		return nil, err
	}
	l.log.Info("listening", zap.Strings("channels", listening), zap.Uint32("backend_pid", conn.PgConn().PID()))
	ok = true
	return func(ctx context.Context) error {
		defer closeConn(conn)
		// The loop's wake after this connect covers every channel
		// listened on so far.
		l.confirm(listening)
		return l.serve(ctx, conn, listening)
	}, nil
}

// confirm closes what AddQueue returned for the channels now listened on.
func (l *Listener) confirm(listening []string) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	for _, ch := range listening {
		if done, ok := l.confirmed[ch]; ok {
			close(done)
			delete(l.confirmed, ch)
		}
	}
}

// resubscribe LISTENs on the channels added and UNLISTENs those removed
// since listening was set, and returns the new set. Each queue of a channel
// it added is woken once the LISTEN is confirmed: LISTEN first, then scan,
// so nothing committed before the LISTEN is left for the safety poll.
func (l *Listener) resubscribe(ctx context.Context, conn *pgx.Conn, listening []string) ([]string, error) {
	wanted := l.wantedChannels()
	for _, ch := range listening {
		if !slices.Contains(wanted, ch) {
			if err := l.exec(ctx, conn, "UNLISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				return listening, fmt.Errorf("unlisten %s: %w", ch, err)
			}
			l.log.Info("stopped listening", zap.String("channel", ch))
		}
	}
	var added []string
	for _, ch := range wanted {
		if !slices.Contains(listening, ch) {
			if err := l.exec(ctx, conn, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
				return listening, fmt.Errorf("listen on %s: %w", ch, err)
			}
			added = append(added, ch)
		}
	}
	if len(added) > 0 {
		if err := l.check(ctx, conn, wanted); err != nil {
			return listening, err
		}
		for _, ch := range added {
			q, _ := strings.CutPrefix(ch, channel.PrefixIn(l.cfg.Schema))
			l.wakeQueue(q, HintMany)
		}
		l.confirm(added)
		l.log.Info("listening", zap.Strings("channels", added))
	}
	return wanted, nil
}

// waitContext is the context of one wait for a notification: it ends after
// PingInterval, or when AddQueue or RemoveQueue changes the channels. ok is
// false when the channels changed since listening was set: resubscribe
// first.
func (l *Listener) waitContext(ctx context.Context, listening []string) (wctx context.Context, cancel func(), ok bool) {
	l.subMu.Lock()
	defer l.subMu.Unlock()
	if !slices.Equal(l.channels, listening) {
		return nil, nil, false
	}
	tctx, cancelTimeout := context.WithTimeout(ctx, l.cfg.PingInterval)
	cctx, interrupt := context.WithCancelCause(tctx)
	l.interrupt = interrupt
	return cctx, func() {
		l.subMu.Lock()
		l.interrupt = nil
		l.subMu.Unlock()
		interrupt(nil)
		cancelTimeout()
	}, true
}

// serve reads notifications until the connection fails or ctx ends. After
// PingInterval without traffic it checks the connection, which is how a
// half-open TCP connection is found.
func (l *Listener) serve(ctx context.Context, conn *pgx.Conn, listening []string) error {
	for {
		wctx, cancel, ok := l.waitContext(ctx, listening)
		if !ok {
			var err error
			if listening, err = l.resubscribe(ctx, conn, listening); err != nil {
				return err
			}
			continue
		}
		n, err := conn.WaitForNotification(wctx)
		idle := wctx.Err() != nil
		changed := errors.Is(context.Cause(wctx), errResubscribe)
		cancel()
		switch {
		case err == nil:
			l.events.Add(1)
			l.log.Debug("notification", zap.String("channel", n.Channel), zap.String("payload", n.Payload))
			if q, ok := strings.CutPrefix(n.Channel, channel.PrefixIn(l.cfg.Schema)); ok {
				// The payload is the id of the queue's first new job of the
				// notifying statement (see migrations/schema.sql).
				job, _ := strconv.ParseInt(n.Payload, 10, 64)
				l.wakeQueue(q, job)
			} else {
				l.wake()
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case changed:
			// The next round resubscribes.
		case idle:
			if err := l.check(ctx, conn, listening); err != nil {
				return err
			}
			l.log.Debug("health check answered")
		default:
			return fmt.Errorf("wait for notification: %w", err)
		}
	}
}

// check pings the server and verifies it still listens on every channel of
// listening.
func (l *Listener) check(ctx context.Context, conn *pgx.Conn, listening []string) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
	defer cancel()
	var got []string
	if err := conn.QueryRow(ctx, sqlListeningChannels).Scan(&got); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	var missing []string
	for _, ch := range listening {
		if !slices.Contains(got, ch) {
			missing = append(missing, ch)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("health check: the connection does not listen on %v", missing)
	}
	return nil
}

func (l *Listener) exec(ctx context.Context, conn *pgx.Conn, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, l.cfg.PingTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, sql)
	return err
}

// listenPoolerAdvice is why a pooler in front of the listener is refused, and
// what to do about it.
const listenPoolerAdvice = "LISTEN through a transaction-mode pooler silently receives nothing; " +
	"point the listen DSN at PostgreSQL directly"

// checkDirect refuses a connection that goes through a pooler, with advice
// saying why and what to do. PgBouncer answers the startup with BackendKeyData
// of its own, so the pid the connection was given differs from the backend's
// real pid.
func checkDirect(ctx context.Context, conn *pgx.Conn, timeout time.Duration, advice string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var pid int32
	if err := conn.QueryRow(ctx, sqlBackendPID).Scan(&pid); err != nil {
		return fmt.Errorf("read backend pid: %w", err)
	}
	if keyPID := conn.PgConn().PID(); uint32(pid) != keyPID {
		return fatal(fmt.Errorf("%w: %s (pg_backend_pid() is %d but the connection's key data says %d, "+
			"as when PgBouncer answers)", ErrPooler, advice, pid, keyPID))
	}
	return nil
}

// closeConn closes conn without waiting long for a server that may be gone.
func closeConn(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
