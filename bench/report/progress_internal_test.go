package report

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestProgressPlain(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var b bytes.Buffer
	p := newProgress(&b, "insert", 1000, false, clock.now)
	require.Empty(t, b.String(), "nothing before the first interval")

	// Many updates within two seconds print nothing.
	for range 19 {
		clock.advance(100 * time.Millisecond)
		p.Add(10)
	}
	require.Empty(t, b.String())

	clock.advance(100 * time.Millisecond) // 2 s, 200 done
	p.Add(10)
	require.Equal(t, "insert: 200/1000 (20%), 100/s, ETA 8s\n", b.String())

	clock.advance(time.Second)
	p.Set(500)
	require.Equal(t, 1, strings.Count(b.String(), "\n"), "at most one line per interval")

	clock.advance(time.Second) // 4 s, 1000 done
	p.Set(1000)
	p.Done()
	p.Done() // idempotent
	p.Add(1) // ignored after Done
	require.Equal(t, ""+
		"insert: 200/1000 (20%), 100/s, ETA 8s\n"+
		"insert: 1000/1000 (100%), 250/s, ETA 0s\n"+
		"insert: 1000/1000 (100%), 250/s, in 4s\n", b.String())
	require.NotContains(t, b.String(), "\r")
}

func TestProgressPlainUnknownTotal(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var b bytes.Buffer
	p := newProgress(&b, "drain", 0, false, clock.now)
	clock.advance(2500 * time.Millisecond)
	p.Add(5)
	p.Done()
	require.Equal(t, "drain: 5, 2.00/s\ndrain: 5, 2.00/s, in 2.5s\n", b.String())
}

func TestProgressTerminal(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var b bytes.Buffer
	p := newProgress(&b, "jobs", 200, true, clock.now)
	require.Equal(t, "\rjobs [------------------------]   0%  0/200  0.00/s  ETA ?", b.String())

	b.Reset()
	p.Add(1) // within 100 ms of the last draw: nothing
	require.Empty(t, b.String())

	clock.advance(time.Second)
	p.Set(50)
	require.Equal(t, "\rjobs [######------------------]  25%  50/200  50.0/s  ETA 3s", b.String())

	b.Reset()
	clock.advance(time.Second)
	p.Set(200)
	p.Done()
	lines := strings.Split(b.String(), "\r")
	final := lines[len(lines)-1]
	require.True(t, strings.HasSuffix(final, "\n"), "Done ends the line")
	require.Equal(t, "jobs [########################] 100%  200/200  100/s  in 2s", strings.TrimRight(final, " \n"))
}

func TestProgressTerminalBlanksShorterLine(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var b bytes.Buffer
	p := newProgress(&b, "x", 0, true, clock.now)
	clock.advance(time.Second)
	p.Set(123456) // "x  123456  123456/s"
	b.Reset()
	clock.advance(time.Second)
	p.Set(1) // "x  1  0.50/s": shorter, so padded over the old text
	require.Equal(t, "\rx  1  0.50/s       ", b.String())
}

func TestProgressConcurrent(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	p := NewProgress(&b, "concurrent", 8000) // a bytes.Buffer is not a terminal
	require.False(t, p.tty)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				p.Add(1)
			}
		})
	}
	wg.Wait()
	p.Done()
	require.True(t, strings.HasPrefix(lastLine(b.String()), "concurrent: 8000/8000 (100%)"), b.String())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// A step that counts past its planned total (a soak's producers catching
// up, a wait that runs a little longer) shows 100%, never more.
func TestProgressNeverPassesItsTotal(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	var b bytes.Buffer
	p := newProgress(&b, "soak", 100, false, clock.now)
	clock.advance(2 * time.Second)
	p.Set(150)
	require.Equal(t, "soak: 100/100 (100%), 75.0/s, ETA 0s\n", b.String())
	b.Reset()
	p.Done()
	require.Equal(t, "soak: 100/100 (100%), 75.0/s, in 2s\n", b.String())

	b.Reset()
	tty := newProgress(&b, "idle", 10, true, clock.now)
	clock.advance(time.Second)
	tty.Set(12)
	require.Contains(t, b.String(), "[########################] 100%  10/10")
}
