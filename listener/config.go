package listener

import (
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
)

// Defaults and allowed ranges of Config.
const (
	PingIntervalDefault = 10 * time.Second
	PingIntervalMin     = 100 * time.Millisecond
	PingIntervalMax     = 10 * time.Minute

	PingTimeoutDefault = 3 * time.Second
	PingTimeoutMin     = 100 * time.Millisecond
	PingTimeoutMax     = time.Minute

	ReconnectMaxDefault = 5 * time.Second
	ReconnectMaxMin     = reconnectInitial
	ReconnectMaxMax     = 5 * time.Minute

	// DefaultQueue is listened to when Config.Queues is empty.
	DefaultQueue = "default"

	// ApplicationName is set on the listener's connection unless the DSN sets
	// one, so operators can find it in pg_stat_activity.
	ApplicationName = "fila-listener"
)

// connectTimeoutDefault bounds each connection attempt when the DSN sets no
// connect_timeout: a host that drops packets would otherwise hold an attempt
// for minutes while the listener reports nothing.
const connectTimeoutDefault = 10 * time.Second

// Config configures a Listener.
type Config struct {
	// DSN leads straight to PostgreSQL, never to a transaction-mode pooler:
	// LISTEN there silently receives nothing. Required.
	DSN string
	// Queues are listened to on the channels channel.ForQueueIn gives.
	// Defaults to ["default"].
	Queues []string
	// Schema is the schema of the Fila tables whose notifications wake: its
	// triggers name their channels after it ("fila:"+Schema+":"+queue), so
	// the listener of one application's schema hears none of another's.
	// Defaults to "", the channels of the schema public, which an install
	// that names no schema has always used.
	Schema string
	// PingInterval is how long the connection may stay silent before the
	// listener checks it, which finds half-open connections. Between
	// PingIntervalMin and PingIntervalMax. Defaults to PingIntervalDefault (10s).
	PingInterval time.Duration
	// PingTimeout bounds each health check and each setup statement. Between
	// PingTimeoutMin and PingTimeoutMax. Defaults to PingTimeoutDefault (3s).
	PingTimeout time.Duration
	// ReconnectMax caps the delay between reconnect attempts. Between
	// ReconnectMaxMin and ReconnectMaxMax. Defaults to ReconnectMaxDefault (5s).
	ReconnectMax time.Duration
	// Expect, if set, is the database the source must reach (the main DSN's):
	// connecting to another one is refused as a configuration error.
	Expect Identity
	// Logger receives the listener's logs under the name "listener". Defaults
	// to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	sourceDefaults(&c.Queues, &c.PingTimeout, &c.ReconnectMax, &c.Logger)
	if c.PingInterval == 0 {
		c.PingInterval = PingIntervalDefault
	}
	return c
}

// sourceDefaults fills the settings Config and WALConfig share.
func sourceDefaults(queues *[]string, pingTimeout, reconnectMax *time.Duration, logger **zap.Logger) {
	if len(*queues) == 0 {
		*queues = []string{DefaultQueue}
	}
	if *pingTimeout == 0 {
		*pingTimeout = PingTimeoutDefault
	}
	if *reconnectMax == 0 {
		*reconnectMax = ReconnectMaxDefault
	}
	if *logger == nil {
		*logger = zap.NewNop()
	}
}

// checkSource checks the DSN and queues every source needs; what names the
// source in its errors ("" or "WAL ").
func checkSource(what, dsn, schema string, queues []string) error {
	if dsn == "" {
		return fmt.Errorf("listener: %sDSN is required (a direct PostgreSQL DSN, not a pooler)", what)
	}
	if _, err := pgconfig.Conn(dsn); err != nil {
		return fmt.Errorf("listener: %sDSN: %w", what, err)
	}
	if schema != "" {
		if err := channel.ValidateSchema(schema); err != nil {
			return fmt.Errorf("listener: %sSchema: %w", what, err)
		}
	}
	for _, q := range queues {
		if _, err := channel.ForQueueIn(schema, q); err != nil {
			return fmt.Errorf("listener: %sQueues: %w", what, err)
		}
	}
	return nil
}

// Validate reports the first field of c (with defaults applied) that cannot
// be used, naming it and its allowed values.
func (c Config) Validate() error {
	c = c.WithDefaults()
	if err := checkSource("", c.DSN, c.Schema, c.Queues); err != nil {
		return err
	}
	if err := checkRange("PingInterval", c.PingInterval, PingIntervalMin, PingIntervalMax); err != nil {
		return err
	}
	if err := checkRange("PingTimeout", c.PingTimeout, PingTimeoutMin, PingTimeoutMax); err != nil {
		return err
	}
	return checkRange("ReconnectMax", c.ReconnectMax, ReconnectMaxMin, ReconnectMaxMax)
}

func checkRange(field string, v, lo, hi time.Duration) error {
	if v < lo || v > hi {
		return fmt.Errorf("listener: %s is %v; it must be between %v and %v", field, v, lo, hi)
	}
	return nil
}

// channels returns the distinct channels for queues of schema, in their
// order.
func channels(schema string, queues []string) ([]string, error) {
	seen := make(map[string]bool, len(queues))
	var out []string
	for _, q := range queues {
		ch, err := channel.ForQueueIn(schema, q)
		if err != nil {
			return nil, err
		}
		if !seen[ch] {
			seen[ch] = true
			out = append(out, ch)
		}
	}
	return out, nil
}
