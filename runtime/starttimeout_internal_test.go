package runtime

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// A start-up statement cancelled by the session's statement_timeout is sent
// again until it succeeds or the start-up's time is up; any other error
// ends the start at once.
func TestStartUpRetriesSessionTimeouts(t *testing.T) {
	t.Parallel()
	sessionTimeout := &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}
	calls := 0
	err := untilNoSessionTimeout(context.Background(), func() error {
		calls++
		if calls < 4 {
			return sessionTimeout
		}
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 4, calls)

	refused := errors.New("database is at migration version 99, newer than this build's")
	calls = 0
	err = untilNoSessionTimeout(context.Background(), func() error { calls++; return refused })
	require.ErrorIs(t, err, refused)
	require.Equal(t, 1, calls, "only the session's timeout is sent again")

	cancelled := &pgconn.PgError{Code: "57014", Message: "canceling statement due to user request"}
	calls = 0
	err = untilNoSessionTimeout(context.Background(), func() error { calls++; return cancelled })
	require.ErrorIs(t, err, cancelled)
	require.Equal(t, 1, calls, "a cancel the client asked for is not the session's timeout")

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = untilNoSessionTimeout(ctx, func() error { return sessionTimeout })
	require.ErrorIs(t, err, sessionTimeout, "the last error is returned once the start-up's time is up")
}
