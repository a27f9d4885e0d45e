package report_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/bench/report"
	"github.com/fila-run/fila/internal/testdb"
)

func TestPlainTransportAddsSSLModeOnlyWhereNoneIsNamed(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	for in, want := range map[string]string{
		"postgres://u@127.0.0.1:5432/db":         "postgres://u@127.0.0.1:5432/db?sslmode=disable",
		"postgresql://u@h/db?application_name=x": "postgresql://u@h/db?application_name=x&sslmode=disable",
		"postgres://u@h/db?sslmode=require":      "postgres://u@h/db?sslmode=require",
		"host=127.0.0.1 dbname=db":               "host=127.0.0.1 dbname=db sslmode=disable",
		"host=127.0.0.1 sslmode=verify-full":     "host=127.0.0.1 sslmode=verify-full",
		"":                                       "sslmode=disable",
		"postgres://u@h/db?default_query_exec_mode=exec&x=1#f": "postgres://u@h/db?default_query_exec_mode=exec&sslmode=disable&x=1#f",
	} {
		require.Equal(t, want, report.PlainTransport(in), "PlainTransport(%q)", in)
	}
	t.Setenv("PGSSLMODE", "require")
	require.Equal(t, "postgres://u@h/db", report.PlainTransport("postgres://u@h/db"), "PGSSLMODE names the mode")
}

// The machine line says whether the connection describing it is
// encrypted; through PlainTransport it is not, whatever the server offers.
func TestDescribeMachineReportsTheTransport(t *testing.T) {
	t.Setenv("PGSSLMODE", "")
	db := testdb.New(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, report.PlainTransport(db.DirectDSN))
	require.NoError(t, err)
	defer pool.Close()
	m, err := report.DescribeMachine(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, "off", m.TLS)
	require.Contains(t, m.String(), ", TLS off")

	var offered string
	require.NoError(t, db.Pool.QueryRow(ctx, "SHOW ssl").Scan(&offered))
	if offered == "on" {
		// The server offers TLS: a DSN asking for it gets it, and says so.
		tlsPool, err := pgxpool.New(ctx, db.DirectDSN+"?sslmode=require")
		require.NoError(t, err)
		defer tlsPool.Close()
		m, err := report.DescribeMachine(ctx, tlsPool)
		require.NoError(t, err)
		require.Equal(t, "on", m.TLS)
	}
}
