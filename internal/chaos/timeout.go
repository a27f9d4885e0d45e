package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// tinyStatementTimeout is the role's statement_timeout in TinyTimeout: far
// below what a claim or an outcome statement of a thousand jobs takes.
const tinyStatementTimeout = "8ms"

// TinyTimeout drains a backlog with runtimes that connect as a role whose
// statement_timeout is 8 ms, and a thousand handler slots each, so that the
// session's timeout would cancel every full claim. Fila's statements carry
// their own timeouts: every job completes once, and no runtime fails.
// The runtimes connect straight to PostgreSQL (the role is the server's,
// and a PgBouncer of the suite knows no such user).
func TinyTimeout(ctx context.Context, env *Env, size Size) (*Result, error) {
	jobs := max(size.Jobs, 2000)
	res := &Result{Load: fmt.Sprintf("%d jobs, %d runtimes × 1000, role statement_timeout %s", jobs, size.Workers, tinyStatementTimeout)}
	db, err := env.newDatabase(ctx, "timeout")
	if err != nil {
		return nil, err
	}
	defer db.drop()
	var b [6]byte
	_, _ = rand.Read(b[:])
	role, password := "fila_chaos_tiny_"+hex.EncodeToString(b[:3]), hex.EncodeToString(b[3:])+"-pw"
	admin, err := pgx.Connect(ctx, env.AdminDSN)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.WithoutCancel(ctx))
	ident := pgx.Identifier{role}.Sanitize()
	if _, err := admin.Exec(ctx, "CREATE ROLE "+ident+" LOGIN PASSWORD '"+password+"'"); err != nil {
		return nil, fmt.Errorf("create a role with a tiny statement_timeout: %w", err)
	}
	defer func() {
		// Its grants live in the scenario's database, dropped first.
		db.drop()
		if _, err := admin.Exec(context.WithoutCancel(ctx), "DROP ROLE IF EXISTS "+ident); err != nil {
			env.logger().Warn("could not drop the scenario's role")
		}
	}()
	if _, err := admin.Exec(ctx, "ALTER ROLE "+ident+" SET statement_timeout = '"+tinyStatementTimeout+"'"); err != nil {
		return nil, err
	}
	if _, err := db.pool.Exec(ctx, "GRANT ALL ON ALL TABLES IN SCHEMA public TO "+ident+"; "+
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO "+ident+"; "+
		"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO "+ident); err != nil {
		return nil, err
	}
	u, err := url.Parse(db.direct)
	if err != nil {
		return nil, err
	}
	u.User = url.UserPassword(role, password)
	dsn := u.String()
	started := time.Now()
	out, err := env.drain(ctx, db, drainSpec{
		jobs: jobs, workers: size.Workers, concurrency: 1000, lease: drainLease, claimBatch: 1000,
		mainDSN: dsn, listenDSN: dsn,
	})
	if err != nil {
		return nil, err
	}
	out.judge(res, jobs, false)
	res.Duplicated = NA // effects are recorded apart from the completion here
	var timeout string
	if err := db.pool.QueryRow(ctx, `SELECT coalesce((SELECT s FROM pg_db_role_setting r, unnest(r.setconfig) s
		WHERE r.setrole = $1::regrole AND s LIKE 'statement_timeout=%'), '')`, role).Scan(&timeout); err != nil {
		return nil, err
	}
	res.check(timeout == "statement_timeout="+tinyStatementTimeout, "the role's setting is %q", timeout)
	res.note("the runtimes connected as a role whose statement_timeout is %s, each with 1000 handler slots (claims of up to 1000 jobs); every job completed, %s after the start",
		tinyStatementTimeout, time.Since(started).Round(time.Millisecond))
	return res, nil
}
