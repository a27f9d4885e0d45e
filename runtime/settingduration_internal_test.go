package runtime

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSettingDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"0": 0, "300ms": 300 * time.Millisecond, "10s": 10 * time.Second, "1min": time.Minute,
		"2h": 2 * time.Hour, "1d": 24 * time.Hour,
	} {
		got, ok := settingDuration(v)
		require.True(t, ok, v)
		require.Equal(t, want, got, v)
	}
	for _, v := range []string{"", "ten", "5us", "-1s", "1.5s"} {
		_, ok := settingDuration(v)
		require.False(t, ok, v)
	}
}
