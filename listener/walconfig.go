package listener

import (
	"time"

	"go.uber.org/zap"
)

// Defaults and allowed ranges of WALConfig beyond those Config shares.
const (
	// StatusIntervalDefault matches pg_recvlogical's: the server learns every
	// 10 s how far the slot may release WAL.
	StatusIntervalDefault = 10 * time.Second
	StatusIntervalMin     = 100 * time.Millisecond
	StatusIntervalMax     = 10 * time.Second

	SlotTimeoutDefault = 10 * time.Second
	SlotTimeoutMin     = 100 * time.Millisecond
	SlotTimeoutMax     = 10 * time.Minute

	// WALApplicationName is set on the WAL source's connections unless the
	// DSN sets one.
	WALApplicationName = "fila-wal"

	// PublicationName is the publication the WAL source creates if missing
	// and streams: inserts into fila_jobs only. With a WALConfig.Schema
	// other than public, the publication of that schema's fila_jobs is
	// PublicationName+"_"+Schema (see channel.Publication).
	PublicationName = "fila_jobs_inserts"

	// SlotPrefix starts the name of each temporary replication slot.
	SlotPrefix = "fila_wake_"
)

// WALConfig configures a WAL source.
type WALConfig struct {
	// DSN leads straight to PostgreSQL as a role with the REPLICATION
	// privilege; replication=database is added for the streaming connection.
	// Required.
	DSN string
	// Queues whose inserts wake. Defaults to ["default"].
	Queues []string
	// Schema is the schema of the fila_jobs whose inserts wake, streamed
	// through a publication of its own (publications are database-wide),
	// and of the triggers whose logical messages wake (prefix
	// "fila:"+Schema). Defaults to "": the publication PublicationName of
	// the fila_jobs the search_path finds, and the messages of the schema
	// public, as an install that names no schema has always used.
	Schema string
	// StatusInterval is how often the source reports its position to the
	// server (so the slot retains no WAL) and asks for a reply, which is its
	// health check. Between StatusIntervalMin and StatusIntervalMax. Defaults
	// to StatusIntervalDefault (10s).
	StatusInterval time.Duration
	// PingTimeout bounds the wait for the server's reply to a status report
	// and each setup statement. Between PingTimeoutMin and PingTimeoutMax.
	// Defaults to PingTimeoutDefault (3s).
	PingTimeout time.Duration
	// SlotTimeout bounds the creation of the replication slot, which waits
	// for every transaction in progress on the instance to end. Between
	// SlotTimeoutMin and SlotTimeoutMax. Defaults to SlotTimeoutDefault (10s).
	SlotTimeout time.Duration
	// ReconnectMax caps the delay between reconnect attempts. Between
	// ReconnectMaxMin and ReconnectMaxMax. Defaults to ReconnectMaxDefault (5s).
	ReconnectMax time.Duration
	// Expect, if set, is the database the source must reach (the main DSN's):
	// connecting to another one is refused as a configuration error.
	Expect Identity
	// Logger receives the source's logs under the name "listener.wal".
	// Defaults to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy of c with zero fields set to their defaults.
func (c WALConfig) WithDefaults() WALConfig {
	sourceDefaults(&c.Queues, &c.PingTimeout, &c.ReconnectMax, &c.Logger)
	if c.StatusInterval == 0 {
		c.StatusInterval = StatusIntervalDefault
	}
	if c.SlotTimeout == 0 {
		c.SlotTimeout = SlotTimeoutDefault
	}
	return c
}

// Validate reports the first field of c (with defaults applied) that cannot
// be used, naming it and its allowed values.
func (c WALConfig) Validate() error {
	c = c.WithDefaults()
	if err := checkSource("WAL ", c.DSN, c.Schema, c.Queues); err != nil {
		return err
	}
	for _, r := range []struct {
		field     string
		v, lo, hi time.Duration
	}{
		{"StatusInterval", c.StatusInterval, StatusIntervalMin, StatusIntervalMax},
		{"PingTimeout", c.PingTimeout, PingTimeoutMin, PingTimeoutMax},
		{"SlotTimeout", c.SlotTimeout, SlotTimeoutMin, SlotTimeoutMax},
		{"ReconnectMax", c.ReconnectMax, ReconnectMaxMin, ReconnectMaxMax},
	} {
		if err := checkRange("WAL "+r.field, r.v, r.lo, r.hi); err != nil {
			return err
		}
	}
	return nil
}
