package listener_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/listener"
)

// cancelledAfterRow is a row whose values arrived before the statement was
// cancelled, as pgx reports it: the destinations are filled, and Scan
// returns the cancellation.
type cancelledAfterRow struct{}

func (cancelledAfterRow) Scan(dest ...any) error {
	*dest[0].(*string) = "7716161371728111766"
	*dest[1].(*string) = "jobs"
	return errors.New("ERROR: canceling statement due to statement timeout (SQLSTATE 57014)")
}

type cancellingQuerier struct{}

func (cancellingQuerier) QueryRow(context.Context, string, ...any) pgx.Row {
	return cancelledAfterRow{}
}

// A failed read gives no identity at all: half of one (the name without
// its cluster) was once checked against the listener's and refused as
// another database, stopping a worker under a tiny statement_timeout.
func TestReadIdentityGivesNothingOnAnError(t *testing.T) {
	t.Parallel()
	id, err := listener.ReadIdentity(context.Background(), cancellingQuerier{})
	require.ErrorContains(t, err, "statement timeout")
	require.True(t, id.IsZero(), "got %s", id)
}
