package runtime

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy is an exponential retry backoff: a failed attempt n waits
// Base·2^(n-1), capped at Max, with "equal jitter" (half of it fixed, half
// random) so that the retries of a failed burst spread out. It is the
// runtime's own policy (Config.RetryBase, Config.RetryMax), a kind's
// (Kind.Backoff = p.Backoff) or one job's (InsertOpts.Retry).
type RetryPolicy struct {
	// Base is the first retry's backoff. Allowed above 0 to Max.
	Base time.Duration
	// Max caps the backoff. Allowed Base to RetryMaxMax.
	Max time.Duration
}

// Backoff is how long after its failed attempt (1 for the first) a job
// runs again under p.
func (p RetryPolicy) Backoff(attempt int) time.Duration {
	d := p.Base
	for i := 1; i < attempt && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// Validate says what is wrong with p, if anything.
func (p RetryPolicy) Validate() error {
	if p.Base <= 0 || p.Max < p.Base || p.Max > RetryMaxMax {
		return fmt.Errorf("retry policy base %s, max %s: base must be above 0, max from base to %s", p.Base, p.Max, RetryMaxMax)
	}
	return nil
}

// jobPolicy is a job's own timeout and retries (InsertOpts.Timeout and
// Retry), stored as JSON in its policy column: {"timeout_ms": N,
// "retry_base_ms": N, "retry_max_ms": N}, which a plain SQL insert may
// write too. Zero fields say nothing.
type jobPolicy struct {
	TimeoutMs   int64 `json:"timeout_ms,omitempty"`
	RetryBaseMs int64 `json:"retry_base_ms,omitempty"`
	RetryMaxMs  int64 `json:"retry_max_ms,omitempty"`
}

func (p jobPolicy) timeout() time.Duration { return time.Duration(p.TimeoutMs) * time.Millisecond }

// retry is the job's retry policy; ok is false when it sets none (or one
// that does not hold, which a plain SQL insert could write: the kind's
// policy applies then).
func (p jobPolicy) retry() (RetryPolicy, bool) {
	r := RetryPolicy{Base: time.Duration(p.RetryBaseMs) * time.Millisecond, Max: time.Duration(p.RetryMaxMs) * time.Millisecond}
	if p.RetryBaseMs == 0 && p.RetryMaxMs == 0 {
		return r, false
	}
	return r, r.Validate() == nil
}

// policy reads the job's own policy, as its claim returned it. Most jobs
// have none and cost a length test.
func (j *Job) policy() jobPolicy {
	if len(j.rawPolicy) == 0 {
		return jobPolicy{}
	}
	var p jobPolicy
	if err := json.Unmarshal(j.rawPolicy, &p); err != nil {
		return jobPolicy{}
	}
	p.TimeoutMs = max(p.TimeoutMs, 0)
	return p
}

// encodePolicy returns o's Timeout and Retry as the policy column holds
// them, nil when o sets neither.
func encodePolicy(o InsertOpts) (*string, error) {
	if o.Timeout == 0 && o.Retry == nil {
		return nil, nil
	}
	var p jobPolicy
	if o.Timeout < 0 {
		return nil, fmt.Errorf("timeout %s is negative", o.Timeout)
	}
	if o.Timeout > 0 {
		p.TimeoutMs = max(o.Timeout.Milliseconds(), 1)
	}
	if o.Retry != nil {
		if err := o.Retry.Validate(); err != nil {
			return nil, err
		}
		p.RetryBaseMs, p.RetryMaxMs = max(o.Retry.Base.Milliseconds(), 1), max(o.Retry.Max.Milliseconds(), 1)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}
