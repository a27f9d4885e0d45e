package runtime_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

type renamed struct {
	N int `json:"n"`
}

func (renamed) Kind() string { return "send-invoice" }

// A renamed kind keeps its old name as an alias: jobs inserted under
// either name run with its handler, which sees the name each job has.
func TestKindAliasesRunJobsOfTheOldName(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[int]string{}
	k := runtime.Work(func(_ context.Context, j *runtime.Job, a renamed) error {
		mu.Lock()
		ran[a.N] = j.Kind
		mu.Unlock()
		return nil
	})
	k.Aliases = []string{"invoice_mail"}
	start(t, baseConfig(t, db, k))

	_, err := runtime.Insert(ctx, db.Pool, "invoice_mail", renamed{N: 1}, nil)
	require.NoError(t, err)
	_, err = runtime.InsertArgs(ctx, db.Pool, renamed{N: 2}, nil)
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "both jobs ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == 2
	})
	require.Equal(t, map[int]string{1: "invoice_mail", 2: "send-invoice"}, ran)
}

func TestKindAliasesAreValidated(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *runtime.Job) error { return nil }
	for _, c := range []struct {
		kinds []runtime.Kind
		want  string
	}{
		{[]runtime.Kind{{Name: "a", Handler: h, Aliases: []string{""}}}, `kind "a": alias:`},
		{[]runtime.Kind{{Name: "a", Handler: h, Aliases: []string{"b"}}, {Name: "b", Handler: h}}, `kind "b" is registered twice`},
		{[]runtime.Kind{{Name: "b", Handler: h}, {Name: "a", Handler: h, Aliases: []string{"b"}}}, `kind "a": alias "b" is registered twice`},
		{[]runtime.Kind{{Name: "a", Handler: h, Aliases: []string{"a"}}}, `alias "a" is registered twice`},
		{[]runtime.Kind{{Name: "a", Handler: h, Aliases: []string{"b"}, Limit: &runtime.Limit{Max: 1}}}, "each name would count its own slots"},
	} {
		_, err := runtime.New(runtime.Config{DSN: "postgres://localhost/x", Kinds: c.kinds})
		require.ErrorContains(t, err, c.want)
	}
}
