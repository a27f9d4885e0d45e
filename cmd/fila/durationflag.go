package main

import (
	"flag"
	"fmt"
	"strings"
	"time"
)

// durationValue is a flag.Value for a duration that, unlike flag.Duration,
// says what is wrong with a value it cannot read: a bare number needs its
// unit.
type durationValue time.Duration

// durationVar defines a duration flag; its help shows it as DURATION.
func durationVar(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage+" (`DURATION` with its unit)")
}

func (d *durationValue) Set(s string) error {
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

func (d *durationValue) String() string { return short(time.Duration(*d)) }

// Get makes the flag a flag.Getter, like flag.Duration's.
func (d *durationValue) Get() any { return time.Duration(*d) }

// parseDuration reads a duration with its unit, as every duration of the
// command line and of a configuration file is read.
func parseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration: write a number and its unit, such as 500ms, 30s or 2m", s)
	}
	return d, nil
}
