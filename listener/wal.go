package listener

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
)

// Errors the WAL source returns from Run when the server cannot stream to it.
var (
	ErrWALLevel             = errors.New("listener: wal_level is not logical")
	ErrReplicationPrivilege = errors.New("listener: role lacks the REPLICATION privilege")
)

const (
	// sqlWALPrerequisites reads what logical replication needs of the server
	// and the role, so a missing one is reported by name.
	sqlWALPrerequisites = `SELECT current_setting('wal_level'), current_user::text,
       coalesce((SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user), false)`
	// sqlPublicationState says whether the publication exists and, if so,
	// whether it publishes inserts into fila_jobs.
	sqlPublicationState = `SELECT p.pubinsert AND EXISTS (
           SELECT 1 FROM pg_publication_tables t
           WHERE t.pubname = p.pubname AND t.tablename = 'fila_jobs' AND ($2::text IS NULL OR t.schemaname = $2::text))
       FROM pg_publication p WHERE p.pubname = $1`
	sqlCreatePublication = `CREATE PUBLICATION ` + PublicationName + ` FOR TABLE fila_jobs WITH (publish = 'insert')`
)

// pubOption is pub as pgoutput's publication_names reads it: a list of
// identifiers, so a name with capitals is quoted. Names hold no quote
// (channel.ValidateSchema).
func pubOption(pub string) string {
	if pub == strings.ToLower(pub) {
		return pub
	}
	return pgx.Identifier{pub}.Sanitize()
}

// publication is the name of the publication of schema's fila_jobs and the
// statement that creates it: for no schema, PublicationName of the
// fila_jobs the search_path finds, as always.
func publication(schema string) (name, create string) {
	if schema == "" {
		return PublicationName, sqlCreatePublication
	}
	name = channel.Publication(schema)
	return name, "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize() + " FOR TABLE " +
		pgx.Identifier{schema, "fila_jobs"}.Sanitize() + " WITH (publish = 'insert')"
}

// walPoolerAdvice is why a pooler in front of the WAL source is refused.
const walPoolerAdvice = "logical replication needs a connection of its own to PostgreSQL; " +
	"point the WAL DSN at PostgreSQL directly"

// cancelGrace is how long a cancelled slot creation may take to give up
// before its connection is closed under it.
const cancelGrace = 5 * time.Second

// stopTimeout bounds ending the stream and dropping the slot on shutdown.
const stopTimeout = 2 * time.Second

// WAL is the logical-replication wake source. It follows inserts into
// fila_jobs through a publication and a temporary pgoutput slot, so producers
// need no trigger and take no notify lock at commit. The slot is created anew
// on each connection and dropped by the server when the connection ends, so a
// dead process leaves no slot retaining WAL.
type WAL struct {
	*state
	cfg WALConfig
}

var _ Source = (*WAL)(nil)

// NewWAL returns a WAL source for cfg (defaults applied), or the error
// Validate finds. It does not connect; Run does.
func NewWAL(cfg WALConfig) (*WAL, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &WAL{
		state: newState(cfg.Logger.Named("listener").Named("wal"), cfg.Queues),
		cfg:   cfg,
	}, nil
}

// AddQueue follows one more queue from the next transaction the stream
// decodes. The stream carries every queue's inserts, so nothing needs
// subscribing: the channel returned is closed already.
func (w *WAL) AddQueue(queue string) (<-chan struct{}, error) {
	if _, err := channel.ForQueueIn(w.cfg.Schema, queue); err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	if err := w.addQueue(queue); err != nil {
		return nil, err
	}
	done := make(chan struct{})
	close(done)
	return done, nil
}

// RemoveQueue stops following queue.
func (w *WAL) RemoveQueue(queue string) error { return w.removeQueue(queue) }

// Wakes is signalled, coalescing, once per transaction that inserts jobs into
// the source's queues, and after every (re)connect.
func (w *WAL) Wakes() <-chan struct{} { return w.wakes }

// Ready is closed once replication first streams from a new slot: every
// transaction that commits afterwards is seen.
func (w *WAL) Ready() <-chan struct{} { return w.ready }

// Healthy reports whether the source is streaming and the server answered its
// last status report.
func (w *WAL) Healthy() bool { return w.healthy.Load() }

// HealthChanges is signalled, coalescing, whenever Healthy flips.
func (w *WAL) HealthChanges() <-chan struct{} { return w.healthChanges }

// Stats returns the source's counters; Notifications counts transactions
// with inserts into its queues.
func (w *WAL) Stats() Stats { return w.stats() }

// Run streams until ctx is cancelled, reconnecting with backoff whenever the
// connection is lost. It returns nil on cancellation, and an error when the
// server cannot stream to it: an unusable DSN, a pooler in the way, wal_level
// below logical, or a role without the REPLICATION privilege.
func (w *WAL) Run(ctx context.Context) error {
	sqlCfg, replCfg, err := w.connConfigs()
	if err != nil {
		return err
	}
	return w.loop(ctx, w.cfg.ReconnectMax, func(ctx context.Context) (session, error) {
		return w.connect(ctx, sqlCfg, replCfg)
	})
}

// connConfigs is the DSN's settings for the ordinary session that runs the
// checks and for the replication session, with the source's defaults.
func (w *WAL) connConfigs() (*pgx.ConnConfig, *pgconn.Config, error) {
	sqlCfg, err := pgconfig.Conn(w.cfg.DSN)
	if err != nil {
		return nil, nil, fmt.Errorf("listener: WAL DSN: %w", err)
	}
	// The checks and the publication need an ordinary session, even when the
	// DSN already asks for replication.
	delete(sqlCfg.RuntimeParams, "replication")
	setConnDefaults(&sqlCfg.Config)

	replCfg := sqlCfg.Config.Copy()
	replCfg.RuntimeParams["replication"] = "database"
	return sqlCfg, replCfg, nil
}

func setConnDefaults(cfg *pgconn.Config) {
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = WALApplicationName
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = connectTimeoutDefault
	}
	ownStatementTimeout(cfg)
}

// connect checks the server, makes sure the publication exists, and starts
// streaming from a new temporary slot.
func (w *WAL) connect(ctx context.Context, sqlCfg *pgx.ConnConfig, replCfg *pgconn.Config) (session, error) {
	if err := w.prepare(ctx, sqlCfg); err != nil {
		return nil, err
	}
	conn, err := pgconn.ConnectConfig(ctx, replCfg)
	if err != nil {
		if pgErrCode(err) == "28000" {
			// "must be superuser or replication role to start walsender"
			return nil, fatal(fmt.Errorf("%w: %w", ErrReplicationPrivilege, err))
		}
		return nil, fmt.Errorf("connect for replication: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			closePgConn(conn)
		}
	}()

	slot := newSlotName()
	if err := w.createSlot(ctx, conn, slot); err != nil {
		return nil, err
	}
	pub, _ := publication(w.cfg.Schema)
	sctx, cancel := context.WithTimeout(ctx, w.cfg.SlotTimeout)
	err = pglogrepl.StartReplication(sctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		// messages: the update trigger's logical messages say which queue got
		// a job back to pending (a retry, a rescue, an operator's UPDATE).
		PluginArgs: []string{"proto_version '1'", "publication_names '" + pubOption(pub) + "'", "messages 'true'"},
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("start replication from slot %s: %w", slot, err)
	}
	w.log.Info("streaming", zap.String("slot", slot), zap.String("publication", pub),
		zap.Strings("queues", slices.Sorted(maps.Keys(w.queueSet()))), zap.Uint32("backend_pid", conn.PID()))
	ok = true
	return func(ctx context.Context) error {
		defer closePgConn(conn)
		err := w.serve(ctx, conn)
		if ctx.Err() != nil {
			w.dropSlot(conn, slot)
		}
		return err
	}, nil
}

// dropSlot ends streaming and drops the slot before the connection closes.
// The server would drop a temporary slot when the walsender exits anyway, but
// only some time after Run returns; dropping it here means that once Run has
// returned no slot of this source is left (so, for one, the database can be
// dropped at once). On any failure the server's own cleanup remains.
func (w *WAL) dropSlot(conn *pgconn.PgConn, slot string) {
	// SendStandbyCopyDone reads without a context: bound it on the socket.
	_ = conn.Conn().SetDeadline(time.Now().Add(stopTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if _, err := pglogrepl.SendStandbyCopyDone(ctx, conn); err != nil {
		w.log.Debug("end streaming", zap.Error(err))
		return
	}
	if err := pglogrepl.DropReplicationSlot(ctx, conn, slot, pglogrepl.DropReplicationSlotOptions{}); err != nil {
		w.log.Debug("drop slot", zap.String("slot", slot), zap.Error(err))
		return
	}
	w.log.Info("stopped; slot dropped", zap.String("slot", slot))
}

// prepare runs the checks that need an ordinary session, and creates the
// publication if it is missing.
func (w *WAL) prepare(ctx context.Context, cfg *pgx.ConnConfig) error {
	conn, err := connectLifted(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer closeConn(conn)
	if err := checkDirect(ctx, conn, w.cfg.PingTimeout, walPoolerAdvice); err != nil {
		return err
	}
	if err := checkIdentity(ctx, conn, w.cfg.PingTimeout, w.cfg.Expect); err != nil {
		return err
	}
	if err := checkPrimary(ctx, conn, w.cfg.PingTimeout); err != nil {
		return err
	}

	qctx, cancel := context.WithTimeout(ctx, w.cfg.PingTimeout)
	defer cancel()
	var walLevel, role string
	var canReplicate bool
	if err := conn.QueryRow(qctx, sqlWALPrerequisites).Scan(&walLevel, &role, &canReplicate); err != nil {
		return fmt.Errorf("read wal_level and role: %w", err)
	}
	if !canReplicate {
		return fatal(fmt.Errorf("%w: role %q cannot stream logical replication; grant it with ALTER ROLE %s REPLICATION, or use a role that has it",
			ErrReplicationPrivilege, role, pgx.Identifier{role}.Sanitize()))
	}
	if walLevel != "logical" {
		return fatal(fmt.Errorf("%w: it is %q; set wal_level = logical and restart PostgreSQL", ErrWALLevel, walLevel))
	}
	return ensurePublication(qctx, conn, w.cfg.Schema)
}

// ensurePublication creates the publication unless it exists. Several
// processes may start at once: losing the race to create it is success.
func ensurePublication(ctx context.Context, conn *pgx.Conn, schema string) error {
	pub, create := publication(schema)
	table, inSchema := "fila_jobs", (*string)(nil)
	if schema != "" {
		table, inSchema = pgx.Identifier{schema, "fila_jobs"}.Sanitize(), &schema
	}
	var usable bool
	err := conn.QueryRow(ctx, sqlPublicationState, pub, inSchema).Scan(&usable)
	switch {
	case err == nil && usable:
		return nil
	case err == nil:
		return fatal(fmt.Errorf("listener: publication %s exists but does not publish inserts into %s; drop it and let Fila recreate it",
			pub, table))
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("read publication %s: %w", pub, err)
	}
	_, err = conn.Exec(ctx, create)
	switch pgErrCode(err) {
	case "":
		return err
	case "42710", "23505": // duplicate_object, or unique_violation when created concurrently
		return nil
	case "42P01": // undefined_table
		return fmt.Errorf("create publication %s: %w (run the migrations first)", pub, err)
	case "42501": // insufficient_privilege
		return fatal(fmt.Errorf("listener: create publication %s: %w; create it as the owner of %s: %s",
			pub, err, table, create))
	}
	return fmt.Errorf("create publication %s: %w", pub, err)
}

// createSlot creates a temporary pgoutput slot, giving up after SlotTimeout.
// Creating a slot waits for every transaction in progress on the instance,
// so one long transaction would hold it indefinitely; on timeout (or when ctx
// ends) a cancel request stops the wait on the server too, rather than
// leaving a walsender behind waiting for that transaction.
func (w *WAL) createSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	sctx, cancel := context.WithTimeout(ctx, w.cfg.SlotTimeout)
	defer cancel()
	cancelled := make(chan struct{})
	stop := context.AfterFunc(sctx, func() {
		defer close(cancelled)
		cctx, cancel := context.WithTimeout(context.Background(), cancelGrace)
		defer cancel()
		_ = conn.CancelRequest(cctx)
	})
	// The hard bound only matters if the cancel request is lost.
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.SlotTimeout+cancelGrace)
	defer hcancel()
	_, err := pglogrepl.CreateReplicationSlot(hctx, conn, slot, "pgoutput", pglogrepl.CreateReplicationSlotOptions{
		Temporary:      true,
		Mode:           pglogrepl.LogicalReplication,
		SnapshotAction: "NOEXPORT_SNAPSHOT",
	})
	if !stop() {
		<-cancelled
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case sctx.Err() != nil:
		return fmt.Errorf("create replication slot %s: not done after %v (SlotTimeout): creating a slot waits for every transaction "+
			"in progress on the instance to end; look for long-running transactions in pg_stat_activity", slot, w.cfg.SlotTimeout)
	case pgErrCode(err) == "55000" && strings.Contains(err.Error(), "recovery"):
		// "logical decoding cannot be used while in recovery": the server
		// became a standby since prepare checked it.
		return fmt.Errorf("%w: %w", ErrStandby, err)
	case pgErrCode(err) == "55000":
		// object_not_in_prerequisite_state: wal_level changed under us.
		return fatal(fmt.Errorf("%w: %w; set wal_level = logical and restart PostgreSQL", ErrWALLevel, err))
	}
	return fmt.Errorf("create replication slot %s: %w", slot, err)
}

// newSlotName returns a fresh slot name: a new one per connection, so a slot
// of an old connection whose walsender has not exited yet never collides.
func newSlotName() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return SlotPrefix + hex.EncodeToString(b[:])
}

func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// closePgConn closes conn without waiting long for a server that may be gone.
func closePgConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
