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
