package duration_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/internal/duration"
)

func TestFormat(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		0:                                        "0s",
		999:                                      "999ns",
		1234:                                     "1.23µs",
		250 * time.Millisecond:                   "250ms",
		1234567:                                  "1.23ms",
		12345678:                                 "12.3ms",
		999_600_000:                              "1s",
		1500 * time.Millisecond:                  "1.5s",
		2 * time.Second:                          "2s",
		12345 * time.Millisecond:                 "12.3s",
		59_970 * time.Millisecond:                "1m",
		76_400 * time.Millisecond:                "1m16s",
		5 * time.Minute:                          "5m",
		59*time.Minute + 59_600*time.Millisecond: "1h",
		time.Hour:                                "1h",
		3*time.Hour + 20*time.Minute + 29*time.Second: "3h20m",
		168 * time.Hour:          "168h",
		-1500 * time.Millisecond: "-1.5s",
	} {
		got := duration.Format(d)
		require.Equal(t, want, got, "%d ns", int64(d))
		back, err := time.ParseDuration(got)
		require.NoError(t, err, "%s reads back", got)
		require.Equal(t, duration.Round(max(d, -d)), max(back, -back), "%s", got)
	}
}
