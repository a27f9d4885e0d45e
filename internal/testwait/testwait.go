// Package testwait waits, in tests, for a condition that no event
// announces: a process gone, a row written by another program, a page
// rendered. It polls the condition until it holds or a deadline passes,
// so that a loaded machine only makes the wait longer, never the test
// fail, as long as the deadline is generous.
package testwait

import (
	"testing"
	"time"
)

// every is how often a condition is checked.
const every = 10 * time.Millisecond

// For checks cond until it holds and reports whether it did within the
// given time. cond runs on the caller's goroutine, so it may fail the test.
func For(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// Until checks cond until it holds, and fails the test if it does not
// within the given time.
func Until(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !For(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}
