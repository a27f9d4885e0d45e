package runtime_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fila-run/fila/runtime"
)

// A value the claim or the backoff cannot carry is refused by New, naming
// the field and its range, rather than wrapped around on its way to SQL:
// a Limit.Max of 2^32+1 sent as an int4 would be 1.
func TestConfigRefusesWhatCannotBeCarried(t *testing.T) {
	t.Parallel()
	h := func(context.Context, *runtime.Job) error { return nil }
	withLimit := func(max int) runtime.Config {
		return runtime.Config{DSN: "postgres://x", Kinds: []runtime.Kind{{Name: "k", Handler: h, Limit: &runtime.Limit{Max: max}}}}
	}
	withRate := func(max int, period time.Duration, key string) runtime.Config {
		c := withLimit(1)
		c.Kinds[0].RateLimit = &runtime.RateLimit{Max: max, Period: period, Key: key}
		return c
	}
	for _, c := range []struct {
		name string
		cfg  runtime.Config
		want string
	}{
		{"limit above int4", withLimit(1<<32 + 1), `kind "k" has Limit.Max 4294967297 out of range: allowed 1 to 2147483647`},
		{"limit just above int4", withLimit(runtime.LimitMaxMax + 1), "Limit.Max 2147483648 out of range"},
		{"limit zero", withLimit(0), "Limit.Max 0 out of range"},
		{"retry cap", func() runtime.Config {
			c := withLimit(1)
			c.RetryMax = runtime.RetryMaxMax + time.Second
			return c
		}(), "RetryMax 720h0m1s out of range"},
		{"retry base above the cap", func() runtime.Config {
			c := withLimit(1)
			c.RetryBase, c.RetryMax = time.Minute, time.Second
			return c
		}(), "RetryBase 1m0s out of range: allowed above 0 to RetryMax (1s)"},
		{"negative grace", func() runtime.Config {
			c := withLimit(1)
			c.HardStopGrace = -time.Second
			return c
		}(), "HardStopGrace -1s is negative"},
		{"rate limit above int4", withRate(1<<32+1, time.Second, ""), `kind "k" has RateLimit.Max 4294967297 out of range: allowed 1 to 2147483647`},
		{"rate limit zero", withRate(0, time.Second, ""), "RateLimit.Max 0 out of range"},
		{"rate period zero", withRate(1, 0, ""), "RateLimit.Period 0s out of range: allowed 1ms to 720h0m0s"},
		{"rate period too long", withRate(1, runtime.RatePeriodMax+time.Second, ""), "RateLimit.Period 720h0m1s out of range"},
		{"rate key", withRate(1, time.Second, "account..id"), `RateLimit.Key "account..id"; want a dotted path`},
		{"liveness too often", func() runtime.Config {
			c := withLimit(1)
			c.LivenessInterval = 500 * time.Millisecond
			return c
		}(), "LivenessInterval 500ms out of range: allowed 1s to 5m0s"},
		{"liveness too seldom", func() runtime.Config {
			c := withLimit(1)
			c.LivenessInterval = 6 * time.Minute
			return c
		}(), "LivenessInterval 6m0s out of range"},
	} {
		_, err := runtime.New(c.cfg)
		require.ErrorContains(t, err, c.want, c.name)
	}
	for _, ok := range []runtime.Config{withLimit(1), withLimit(runtime.LimitMaxMax), withRate(1, runtime.RatePeriodMin, "a.b"), func() runtime.Config {
		c := withLimit(1)
		c.RetryBase, c.RetryMax = runtime.RetryMaxMax, runtime.RetryMaxMax
		return c
	}()} {
		_, err := runtime.New(ok)
		require.NoError(t, err)
	}
}
