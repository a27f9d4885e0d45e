package channel

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestForQueue(t *testing.T) {
	ch, err := ForQueue("emails.high-prio_2")
	require.NoError(t, err)
	require.Equal(t, "fila_emails.high-prio_2", ch)
	for _, bad := range []string{"", "with space", "quote\"", strings.Repeat("q", MaxQueueLen+1), "ção"} {
		_, err := ForQueue(bad)
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), "queue name")
	}
	ch, err = ForQueue(strings.Repeat("q", MaxQueueLen))
	require.NoError(t, err)
	require.Len(t, ch, 63, "fits PostgreSQL's identifier limit")
}

func TestSchemaNames(t *testing.T) {
	for _, s := range []string{"", "public"} {
		ch, err := ForQueueIn(s, "q")
		require.NoError(t, err)
		require.Equal(t, "fila_q", ch, "the default schema keeps the old channel")
		require.Equal(t, "fila", MessagePrefix(s))
		require.Equal(t, "fila_jobs_inserts", Publication(s))
	}
	ch, err := ForQueueIn("app_a", "q")
	require.NoError(t, err)
	require.Equal(t, "fila:app_a:q", ch)
	require.Equal(t, "fila:app_a", MessagePrefix("app_a"))
	require.Equal(t, "fila_jobs_inserts_app_a", Publication("app_a"))
	_, err = ForQueueIn("app_a", strings.Repeat("q", 53))
	require.ErrorContains(t, err, "in schema app_a at most 52 fit")

	require.NoError(t, ValidateSchema("App_2"))
	require.NoError(t, ValidateSchema(strings.Repeat("s", MaxSchemaLen)))
	require.Len(t, Publication(strings.Repeat("s", MaxSchemaLen)), 63)
	for bad, want := range map[string]string{
		"":                                  "schema name is empty",
		"app-a":                             "may contain only",
		"1app":                              "may not start with a digit",
		"a.b":                               "may contain only",
		"pg_fila":                           "reserves",
		strings.Repeat("s", MaxSchemaLen+1): "at most 45 fit",
	} {
		require.ErrorContains(t, ValidateSchema(bad), want, "%q", bad)
	}
}
