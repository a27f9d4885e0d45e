package migrations

// Advisory lock keys: every pg_advisory*lock that Fila's Go code or SQL
// takes uses one of these. PostgreSQL keeps two key spaces that never meet:
// a single bigint, and a pair of integers (classid, objid). The pair's
// classid says what is locked and its objid which one, so Fila's pair locks
// cannot collide with an application's single-key locks, and LockMigrate
// (single key) cannot collide with LockConcurrencyKey (pair) although their
// values are equal.
//
// The SQL functions in the migrations spell the values out (a PL/pgSQL
// function cannot read a Go constant, and a migration once applied is
// history); TestAdvisoryLockKeys checks that every key they use is one of
// these.
const (
	// LockMigrate serialises Migrate and Rollback: each takes it, as a
	// single key, for the transaction that reads the version and applies
	// the scripts, so any number of workers may migrate at start-up. Its
	// value spells "fila".
	LockMigrate int64 = 0x66696c61

	// LockConcurrencyKey is the classid fila_claim tries, without waiting,
	// on hashtext(kind || E'\x1f' || key) while it decides whether a
	// (kind, concurrency key) pair has a free slot: two claims counting the
	// same pair's running jobs at once would both see the slot free. A
	// claim that cannot take it skips the pair this round.
	LockConcurrencyKey int32 = 1718185057

	// LockQueueSleep is the classid of the sleep/notify rule, on
	// hashtext(queue): the insert trigger holds it shared until its commit
	// before reading fila_sleepers, and fila_sleep tries it exclusively
	// before recording a worker's sleep, so either the producer sees the
	// sleeper and notifies, or its job committed before the worker's next
	// claim (migration 0005).
	LockQueueSleep int32 = 1718185058

	// LockMigrateSchema is the classid of the migration lock of Fila's
	// tables in a named schema, on hashtext(schema): MigrateIn and
	// RollbackIn take it in place of LockMigrate, so the applications of
	// two schemas of one database migrate without waiting for each other.
	// Migrations of the default schema keep LockMigrate.
	LockMigrateSchema int32 = 1718185060
)
