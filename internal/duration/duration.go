// Package duration writes durations the one way Fila's command line shows
// them: three significant figures under a minute (250ms, 1.25s, 12.3s),
// whole seconds under an hour (1m16s), whole minutes above (3h20m), without
// the zero units time.Duration.String ends with (5m, not 5m0s). What it
// writes is a Go duration, so it reads back as a flag value.
package duration

import (
	"strings"
	"time"
)

// Format writes d at Fila's one precision.
func Format(d time.Duration) string {
	if d < 0 {
		return "-" + Format(-d)
	}
	d = Round(d)
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Round rounds d (not negative) to what Format shows of it.
func Round(d time.Duration) time.Duration {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute)
	case d >= time.Minute:
		return d.Round(time.Second)
	}
	// Three significant figures: 1234567ns is 1.23ms.
	unit := time.Duration(1)
	for v := d; v >= 1000; v /= 10 {
		unit *= 10
	}
	r := d.Round(unit)
	if r >= time.Minute {
		return Round(r) // 59.97s rounds up to a minute
	}
	return r
}
