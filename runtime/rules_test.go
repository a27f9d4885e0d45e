package runtime_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// TestChangeRulesMatchTheStatements checks that CanRetry, CanCancel and
// CanDelete, which the dashboard and the command line ask, say of every
// state what Retry, Cancel and Delete do to a job in it.
func TestChangeRulesMatchTheStatements(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		can    func(string) bool
		change func(context.Context, runtime.DB, ...int64) (runtime.ChangeResult, error)
	}{
		{"retry", runtime.CanRetry, runtime.Retry},
		{"cancel", runtime.CanCancel, runtime.Cancel},
		{"delete", runtime.CanDelete, runtime.Delete},
	} {
		for _, state := range runtime.JobStates() {
			id := seedJobInState(t, db, "rules", "default", state)
			res, err := c.change(ctx, db.Pool, id)
			require.NoError(t, err, "%s a %s job", c.name, state)
			require.Equal(t, c.can(state), len(res.Changed) == 1, "%s a %s job: changed %v, skipped %v", c.name, state, res.Changed, res.Skipped)
		}
	}
	// The Where forms accept exactly the states their lists name.
	for _, c := range []struct {
		name   string
		states []string
		change func(context.Context, runtime.DB, runtime.JobFilter) (runtime.ChangeResult, error)
	}{
		{"retry", runtime.RetryStates(), runtime.RetryWhere},
		{"cancel", runtime.CancelStates(), runtime.CancelWhere},
		{"delete", runtime.DeleteStates(), runtime.DeleteWhere},
	} {
		for _, state := range runtime.ListStates() {
			_, err := c.change(ctx, db.Pool, runtime.JobFilter{State: state, Kind: "none-of-these"})
			if slices.Contains(c.states, state) {
				require.NoError(t, err, "%s --state %s", c.name, state)
			} else {
				require.Error(t, err, "%s --state %s", c.name, state)
			}
		}
	}
}
