package report

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/fila-run/fila/internal/duration"
)

// How often Progress writes. A terminal redraws one line in place, so it can
// be lively; a log (CI, a file) keeps every line, so it gets one now and then.
const (
	ttyInterval   = 100 * time.Millisecond
	plainInterval = 2 * time.Second
	barWidth      = 24
)

// Progress reports how far a long benchmark step has got. On a terminal it
// redraws a single line — bar, percent, count/total, rate and ETA — at most
// about ten times a second; anywhere else it prints a plain line at most
// every two seconds and one at Done, so CI logs show progress without
// flooding. A total of 0 means unknown: only the count and rate are shown.
//
// Progress is safe for concurrent use; write errors are ignored, since a
// progress line is never worth failing a run for.
type Progress struct {
	mu      sync.Mutex
	w       io.Writer
	label   string
	total   int
	tty     bool
	now     func() time.Time // replaced in tests
	start   time.Time
	last    time.Time // last write
	n       int
	lastLen int // runes of the last terminal line, to blank what a shorter one leaves
	done    bool
}

// NewProgress starts reporting progress of label towards total to w. On a
// terminal the empty bar is drawn at once.
func NewProgress(w io.Writer, label string, total int) *Progress {
	return newProgress(w, label, total, isTerminal(w), time.Now)
}

func newProgress(w io.Writer, label string, total int, tty bool, now func() time.Time) *Progress {
	p := &Progress{w: w, label: label, total: max(total, 0), tty: tty, now: now}
	p.start = now()
	p.last = p.start
	if tty {
		p.draw(p.start)
	}
	return p
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Add records n more units done.
func (p *Progress) Add(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += n
	p.maybeDraw()
}

// Set records that n units are done in all.
func (p *Progress) Set(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	p.maybeDraw()
}

// Done writes the final state and ends the line. Later calls to Add, Set and
// Done write nothing.
func (p *Progress) Done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		return
	}
	p.done = true
	p.draw(p.now())
	if p.tty {
		_, _ = io.WriteString(p.w, "\n")
	}
}

func (p *Progress) maybeDraw() {
	if p.done {
		return
	}
	interval := plainInterval
	if p.tty {
		interval = ttyInterval
	}
	if now := p.now(); now.Sub(p.last) >= interval {
		p.draw(now)
	}
}

// draw writes the current state. The caller holds p.mu.
func (p *Progress) draw(now time.Time) {
	p.last = now
	line := p.line(now.Sub(p.start))
	if !p.tty {
		_, _ = io.WriteString(p.w, line+"\n")
		return
	}
	n := len([]rune(line))
	pad := strings.Repeat(" ", max(p.lastLen-n, 0))
	p.lastLen = n
	_, _ = io.WriteString(p.w, "\r"+line+pad)
}

// line formats the state after elapsed (a count past the total shows as
// the total: a step that does a little more than it planned is done, not
// at 104%): on a terminal
//
//	label [#########---------------]  37%  370/1000  412/s  ETA 2s
//
// and in a log
//
//	label: 370/1000 (37%), 412/s, ETA 2s
//
// The bar is left out of logs, where it would only repeat the percentage.
// After Done the ETA gives way to the elapsed time.
func (p *Progress) line(elapsed time.Duration) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(p.n) / elapsed.Seconds()
	}
	rateStr := formatNumber(rate) + "/s"
	tail := ""
	switch {
	case p.done:
		tail = "in " + formatDuration(elapsed)
	case p.total > 0 && rate > 0:
		tail = "ETA " + formatDuration(time.Duration(float64(max(p.total-p.n, 0))/rate*float64(time.Second)))
	case p.total > 0:
		tail = "ETA ?"
	}

	if p.total == 0 {
		if p.tty {
			return strings.TrimRight(fmt.Sprintf("%s  %d  %s  %s", p.label, p.n, rateStr, tail), " ")
		}
		return strings.TrimRight(fmt.Sprintf("%s: %d, %s, %s", p.label, p.n, rateStr, tail), ", ")
	}
	n := min(max(p.n, 0), p.total)
	frac := float64(n) / float64(p.total)
	pct := int(frac * 100)
	if p.tty {
		filled := int(frac * barWidth)
		bar := strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled)
		return fmt.Sprintf("%s [%s] %3d%%  %d/%d  %s  %s", p.label, bar, pct, n, p.total, rateStr, tail)
	}
	return fmt.Sprintf("%s: %d/%d (%d%%), %s, %s", p.label, n, p.total, pct, rateStr, tail)
}

// formatDuration writes d as fila's command line writes every duration.
func formatDuration(d time.Duration) string { return duration.Format(d) }
