// Package fallbackpoll decides when a worker claims without having been told
// to: the slow safety poll that catches notifications lost while everything
// looked healthy, the fast poll while the wake source is down, the idle
// backoff of pure-poll mode, and the timer for the next scheduled job or
// lease expiry, so retries and scheduled jobs start on time without polling.
//
// It is a building block that package runtime wires together; its API is not
// stable.
package fallbackpoll

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"go.uber.org/zap"
)

// Limits and defaults of Config.
const (
	SafetyPollDefault    = 30 * time.Second
	SafetyPollMin        = time.Second
	SafetyPollMax        = 10 * time.Minute
	UnhealthyPollDefault = time.Second
	UnhealthyPollMin     = 10 * time.Millisecond
	PollMinDefault       = 50 * time.Millisecond
	PollMinMin           = time.Millisecond
	PollMinMax           = time.Minute
	PollMaxDefault       = 2 * time.Second
	// dueSlack is added to every due timer: a job whose run_at is exactly now
	// is claimable only once the database clock has passed it.
	dueSlack = 2 * time.Millisecond
	// minDue keeps a due time already in the past (rows locked by another
	// worker, say) from turning into a tight loop.
	minDue = 20 * time.Millisecond
)

// Config configures a Poller.
type Config struct {
	// PurePoll means there is no wake source: the interval starts at PollMin
	// after work was found and backs off to PollMax while idle. Defaults to false.
	PurePoll bool
	// SafetyPoll is the interval while the wake source is healthy. Defaults to
	// SafetyPollDefault; allowed SafetyPollMin to SafetyPollMax.
	SafetyPoll time.Duration
	// UnhealthyPoll is the interval while the wake source is down. Defaults to
	// UnhealthyPollDefault.
	UnhealthyPoll time.Duration
	// PollMin is the pure-poll interval while work flows. Defaults to PollMinDefault.
	PollMin time.Duration
	// PollMax caps the pure-poll idle backoff. Defaults to PollMaxDefault.
	PollMax time.Duration
	// TimerOnly makes the Poller keep only the due timer: another Poller
	// (one for every queue of a worker, say) polls. Defaults to false.
	TimerOnly bool
	// Logger defaults to zap.NewNop().
	Logger *zap.Logger
}

// WithDefaults returns a copy with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.SafetyPoll == 0 {
		c.SafetyPoll = SafetyPollDefault
	}
	if c.UnhealthyPoll == 0 {
		c.UnhealthyPoll = UnhealthyPollDefault
	}
	if c.PollMin == 0 {
		c.PollMin = PollMinDefault
	}
	if c.PollMax == 0 {
		c.PollMax = PollMaxDefault
	}
	if c.PollMax < c.PollMin {
		c.PollMax = c.PollMin
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate names the field that is out of range.
func (c Config) Validate() error {
	if c.SafetyPoll < SafetyPollMin || c.SafetyPoll > SafetyPollMax {
		return fmt.Errorf("SafetyPoll %s out of range: allowed %s to %s", c.SafetyPoll, SafetyPollMin, SafetyPollMax)
	}
	if c.UnhealthyPoll < UnhealthyPollMin || c.UnhealthyPoll > c.SafetyPoll {
		return fmt.Errorf("UnhealthyPoll %s out of range: allowed %s to SafetyPoll (%s)", c.UnhealthyPoll, UnhealthyPollMin, c.SafetyPoll)
	}
	if c.PollMin < PollMinMin || c.PollMin > PollMinMax {
		return fmt.Errorf("PollMin %s out of range: allowed %s to %s", c.PollMin, PollMinMin, PollMinMax)
	}
	if c.PollMax < c.PollMin || c.PollMax > SafetyPollMax {
		return fmt.Errorf("PollMax %s out of range: allowed PollMin (%s) to %s", c.PollMax, c.PollMin, SafetyPollMax)
	}
	return nil
}

// Reason says why a Poller woke the worker.
type Reason string

// Reasons a Poller wakes.
const (
	// ReasonPoll is the poll interval: the safety poll, the fast poll while
	// the wake source is down, or pure-poll mode's interval.
	ReasonPoll Reason = "poll"
	// ReasonDue is the timer for the next scheduled job or lease expiry.
	ReasonDue Reason = "timer"
)

// Poller sends a wake whenever the worker should claim without having been
// notified.
type Poller struct {
	cfg   Config
	log   *zap.Logger
	wakes chan Reason
	kick  chan struct{}

	mu      sync.Mutex
	healthy bool
	idle    *backoff.ExponentialBackOff
	next    time.Duration // current poll interval
	polled  bool          // a claim happened: restart the poll interval
	due     time.Time     // next scheduled job / lease expiry (local monotonic time), zero if none
}

// New returns a Poller. The wake source starts unhealthy until told otherwise.
func New(cfg Config) (*Poller, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	idle := backoff.NewExponentialBackOff()
	idle.InitialInterval = cfg.PollMin
	idle.MaxInterval = cfg.PollMax
	idle.Multiplier = 2
	idle.RandomizationFactor = 0.1
	idle.MaxElapsedTime = 0
	idle.Reset()
	p := &Poller{cfg: cfg, log: cfg.Logger.Named("fallbackpoll"), wakes: make(chan Reason, 1),
		kick: make(chan struct{}, 1), idle: idle}
	p.next = p.interval()
	return p, nil
}

// Wakes signals (coalesced) that the worker should claim, and why.
func (p *Poller) Wakes() <-chan Reason { return p.wakes }

// Interval is the poll interval in force now.
func (p *Poller) Interval() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// interval must be called with mu held.
func (p *Poller) interval() time.Duration {
	switch {
	case p.cfg.PurePoll:
		return p.idle.NextBackOff()
	case p.healthy:
		return p.cfg.SafetyPoll
	default:
		return p.cfg.UnhealthyPoll
	}
}

// SetHealthy tells the poller whether the wake source is healthy: while it is
// not, the poll runs at UnhealthyPoll.
func (p *Poller) SetHealthy(healthy bool) {
	p.mu.Lock()
	changed := p.healthy != healthy
	p.healthy = healthy
	if changed && !p.cfg.PurePoll {
		p.next = p.interval()
		p.polled = true
	}
	p.mu.Unlock()
	if changed && !p.cfg.TimerOnly {
		p.log.Info("wake source health changed", zap.Bool("healthy", healthy))
		if !healthy {
			p.signal(ReasonPoll) // notifications may have been lost already
		}
		p.poke()
	}
}

// Claimed reports a claim: found is how many jobs it returned. A claim
// restarts the poll interval (it already looked at the head of the queue),
// and in pure-poll mode work found resets the idle backoff.
func (p *Poller) Claimed(found int) {
	p.mu.Lock()
	if p.cfg.PurePoll {
		if found > 0 {
			p.idle.Reset()
		}
	}
	p.next = p.interval()
	p.polled = true
	p.mu.Unlock()
	p.poke()
}

// SetDue sets the timer for the next scheduled job or lease expiry, replacing
// the previous one; ok false clears it. d comes from the database clock.
func (p *Poller) SetDue(d time.Duration, ok bool) {
	p.mu.Lock()
	if ok {
		p.due = time.Now().Add(clampDue(d))
	} else {
		p.due = time.Time{}
	}
	p.mu.Unlock()
	p.poke()
}

// DueWithin moves the timer earlier if d is sooner than the one set (a retry
// this worker just scheduled, say).
func (p *Poller) DueWithin(d time.Duration) {
	at := time.Now().Add(clampDue(d))
	p.mu.Lock()
	changed := p.due.IsZero() || at.Before(p.due)
	if changed {
		p.due = at
	}
	p.mu.Unlock()
	if changed {
		p.poke()
	}
}

func clampDue(d time.Duration) time.Duration {
	d += dueSlack
	if d < minDue {
		d = minDue
	}
	return d
}

// Wake sends a wake for r, as the Poller's own interval would: the poll of
// another Poller found work for this one.
func (p *Poller) Wake(r Reason) { p.signal(r) }

func (p *Poller) signal(r Reason) {
	select {
	case p.wakes <- r:
	default:
	}
}

func (p *Poller) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run sends wakes until ctx is cancelled; it returns nil then.
func (p *Poller) Run(ctx context.Context) error {
	pollTimer := time.NewTimer(p.Interval())
	defer pollTimer.Stop()
	if p.cfg.TimerOnly {
		pollTimer.Stop()
	}
	dueTimer := time.NewTimer(time.Hour)
	dueTimer.Stop()
	defer dueTimer.Stop()
	for {
		p.mu.Lock()
		if p.polled && !p.cfg.TimerOnly {
			p.polled = false
			pollTimer.Reset(p.next)
		}
		due := p.due
		p.mu.Unlock()
		dueTimer.Stop()
		if !due.IsZero() {
			dueTimer.Reset(time.Until(due))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.kick:
		case <-pollTimer.C:
			// The claim this wake causes calls Claimed, which picks the next
			// interval; until then, keep the current one.
			p.log.Debug("poll")
			pollTimer.Reset(p.Interval())
			p.signal(ReasonPoll)
		case <-dueTimer.C:
			p.log.Debug("due")
			p.mu.Lock()
			if p.due.Equal(due) {
				p.due = time.Time{}
			}
			p.mu.Unlock()
			p.signal(ReasonDue)
		}
	}
}
