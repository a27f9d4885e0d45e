package runtime

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
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

// MetadataPolicyKey is the key of a job's metadata under which the job's own
// policy travels: the InsertOpts.Timeout and InsertOpts.Retry of its insert,
// as {"timeout_ms": N, "retry_base_ms": N, "retry_max_ms": N}. A plain SQL
// insert may write it too. It is Fila's: InsertOpts.Metadata may not use it.
const MetadataPolicyKey = "fila"

// jobPolicy is what a job's metadata says of its own timeout and retries;
// zero fields say nothing.
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

var policyKeyJSON = []byte(`"` + MetadataPolicyKey + `"`)

// policy reads the job's own policy from its metadata. Most jobs have no
// metadata, or none with the key, and cost a byte search at most.
func (j *Job) policy() jobPolicy {
	if len(j.Metadata) == 0 || !bytes.Contains(j.Metadata, policyKeyJSON) {
		return jobPolicy{}
	}
	var m struct {
		P *jobPolicy `json:"fila"`
	}
	if err := json.Unmarshal(j.Metadata, &m); err != nil || m.P == nil {
		return jobPolicy{}
	}
	p := *m.P
	p.TimeoutMs = max(p.TimeoutMs, 0)
	return p
}

// withPolicy returns o's metadata with its Timeout and Retry under
// MetadataPolicyKey, a new map when it adds them (the caller's is left as
// it was).
func withPolicy(o InsertOpts) (map[string]any, error) {
	if _, taken := o.Metadata[MetadataPolicyKey]; taken {
		return nil, fmt.Errorf("metadata key %q is Fila's own (InsertOpts.Timeout and Retry): use another", MetadataPolicyKey)
	}
	if o.Timeout == 0 && o.Retry == nil {
		return o.Metadata, nil
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
	m := make(map[string]any, len(o.Metadata)+1)
	maps.Copy(m, o.Metadata)
	m[MetadataPolicyKey] = p
	return m, nil
}
