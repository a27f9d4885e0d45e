package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/listener"
	"github.com/fila-run/fila/runtime"
)

func TestListenerPingConfig(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *runtime.Job) error { return nil }
	cfg := runtime.Config{DSN: "postgres://x", Kinds: []runtime.Kind{{Name: "k", Handler: h}}}
	d := cfg.WithDefaults()
	require.Equal(t, listener.PingIntervalDefault, d.ListenerPingInterval)
	require.Equal(t, listener.PingTimeoutDefault, d.ListenerPingTimeout)

	bad := cfg
	bad.ListenerPingInterval = time.Millisecond
	_, err := runtime.New(bad)
	require.ErrorContains(t, err, "ListenerPingInterval")
	bad = cfg
	bad.ListenerPingTimeout = time.Hour
	_, err = runtime.New(bad)
	require.ErrorContains(t, err, "ListenerPingTimeout")

	ok := cfg
	ok.ListenerPingInterval, ok.ListenerPingTimeout = listener.PingIntervalMin, listener.PingTimeoutMin
	_, err = runtime.New(ok)
	require.NoError(t, err)
}
