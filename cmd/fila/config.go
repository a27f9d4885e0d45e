package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/runtime"
)

// The configuration file of `fila work --config FILE` declares every worker
// group of one process, its recurring tasks and what the process serves.
// docs/fila.example.yaml shows and explains every key; the tests load it.
//
//	dsn, listen_dsn             connections, as ${VAR} references only
//	shutdown_timeout            the drain of every group on SIGTERM
//	metrics_addr, health_addr   /metrics, /livez and /readyz for the process
//	ui_addr, ui_admin_token     the dashboard (its token as a reference only)
//	workers: [group …]          one runtime each
//	recurring: [task …]         each scheduled by one group
//	x-…                         ignored: anchors for the groups to merge in
var (
	fileKeys = []string{"dsn", "listen_dsn", "shutdown_timeout", "metrics_addr", "health_addr",
		"ui_addr", "ui_admin_token", "workers", "recurring", extensionPrefix + "*"}
	groupKeys = []string{"name", "dsn", "listen_dsn", "queues", "concurrency", "max_concurrency", "mode",
		"lease", "safety_poll", "unhealthy_poll", "poll_min", "poll_max", "busy_rate",
		"retention", "dead_retention", "exec"}
	queueKeys = []string{"name", "concurrency"}
	execKeys  = []string{"command", "timeout", "limit"}
	limitKeys = []string{"max", "key"}
	taskKeys  = []string{"name", "group", "schedule", "time_zone", "kind", "queue", "payload",
		"max_attempts", "missed"}
)

// Defaults and limits of the file's values that neither a flag nor
// runtime.Config spells out.
const (
	// shutdownTimeoutDefault is --shutdown-timeout's default.
	shutdownTimeoutDefault = 30 * time.Second
	// limitMaxMax is the largest Limit.Max the claim takes (an int4).
	limitMaxMax = math.MaxInt32
)

// groupName is what a worker group may be called: it appears in logs and
// errors, so plain words only.
var groupName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)

// workFile is a configuration file, checked and resolved: everything but
// the handlers, which need the process's stdout.
type workFile struct {
	// dsn and listenDSN are the file's connections, "" where it sets none.
	dsn, listenDSN                           string
	shutdown                                 time.Duration
	metricsAddr, healthAddr, uiAddr, uiToken string
	groups                                   []*groupSpec
}

// groupSpec is one worker group: one runtime.
type groupSpec struct {
	name string
	at   confNode // where the group is declared, for errors found later
	// dsn and listenDSN override the file's, "" where the group sets none.
	dsn, listenDSN string
	// cfg holds everything but DSNs, Kinds, Observer and Logger.
	cfg   runtime.Config
	execs []execSpec
}

// execSpec is a kind run by a command.
type execSpec struct {
	name, command string
	timeout       time.Duration
	limit         *runtime.Limit
	at            confNode
}

// loadWorkFile reads and checks a configuration file; getenv resolves its
// ${VAR} references.
func loadWorkFile(path string, getenv func(string) (string, bool)) (*workFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	root, err := parseYAML(path, data)
	if err != nil {
		return nil, err
	}
	top, err := root.fields(fileKeys...)
	if err != nil {
		return nil, err
	}
	wf := &workFile{shutdown: shutdownTimeoutDefault}
	if v, ok := top.get("dsn"); ok {
		if wf.dsn, err = v.secret(getenv, "FILA_DSN"); err != nil {
			return nil, err
		}
	}
	if v, ok := top.get("listen_dsn"); ok {
		if wf.listenDSN, err = v.secret(getenv, "FILA_LISTEN_DSN"); err != nil {
			return nil, err
		}
	}
	if v, ok := top.get("shutdown_timeout"); ok {
		if wf.shutdown, err = v.duration(0, noLimit); err != nil {
			return nil, err
		}
	}
	for _, a := range []struct {
		key string
		dst *string
	}{{"metrics_addr", &wf.metricsAddr}, {"health_addr", &wf.healthAddr}, {"ui_addr", &wf.uiAddr}} {
		if v, ok := top.get(a.key); ok {
			if *a.dst, err = address(v); err != nil {
				return nil, err
			}
		}
	}
	if v, ok := top.get("ui_admin_token"); ok {
		if wf.uiToken, err = v.secret(getenv, "FILA_UI_ADMIN_TOKEN"); err != nil {
			return nil, err
		}
		if wf.uiAddr == "" {
			return nil, v.errorf("there is no dashboard to protect: set ui_addr too")
		}
	}

	workers, ok := top.get("workers")
	if !ok {
		return nil, root.errorf("no workers: declare at least one group under workers:")
	}
	items, err := workers.items()
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, workers.errorf("no groups: declare at least one")
	}
	for _, item := range items {
		g, err := loadGroup(item, getenv)
		if err != nil {
			return nil, err
		}
		for _, other := range wf.groups {
			if other.name == g.name {
				return nil, g.at.errorf("group %s is declared twice (first at line %d)", g.name, other.at.n.Line)
			}
		}
		wf.groups = append(wf.groups, g)
	}
	if err := checkSharedLimits(wf.groups); err != nil {
		return nil, err
	}
	if v, ok := top.get("recurring"); ok {
		if err := loadRecurring(v, wf.groups); err != nil {
			return nil, err
		}
	}
	return wf, nil
}

// address returns a HOST:PORT value.
func address(v confNode) (string, error) {
	s, err := v.str()
	if err != nil {
		return "", err
	}
	if err := checkAddr("", s); err != nil {
		return "", v.errorf("%q: want HOST:PORT such as 127.0.0.1:9090 or :9090", s)
	}
	return s, nil
}

// loadGroup reads one entry of workers:. A key left out takes the same
// default as the flag of that name; a key given must hold a value in the
// flag's range (zero is never a stand-in for the default).
func loadGroup(v confNode, getenv func(string) (string, bool)) (*groupSpec, error) {
	f, err := v.fields(groupKeys...)
	if err != nil {
		return nil, err
	}
	g := &groupSpec{at: v}
	nameAt, ok := f.get("name")
	if !ok {
		return nil, v.errorf("a group needs a name (it names the group in logs and errors)")
	}
	if g.name, err = nameAt.str(); err != nil {
		return nil, err
	}
	if !groupName.MatchString(g.name) {
		return nil, nameAt.errorf("%q: use 1 to 63 letters, digits, '_', '.' and '-'", g.name)
	}
	if at, ok := f.get("dsn"); ok {
		if g.dsn, err = at.secret(getenv, "FILA_DSN"); err != nil {
			return nil, err
		}
	}
	if at, ok := f.get("listen_dsn"); ok {
		if g.listenDSN, err = at.secret(getenv, "FILA_LISTEN_DSN"); err != nil {
			return nil, err
		}
	}
	c := &g.cfg
	if err := loadQueues(f, c); err != nil {
		return nil, err
	}
	if at, ok := f.get("concurrency"); ok {
		if c.Concurrency, err = at.integer(1, runtime.ConcurrencyMax, fmt.Sprintf("allowed 1 to %d", runtime.ConcurrencyMax)); err != nil {
			return nil, err
		}
	}
	if at, ok := f.get("max_concurrency"); ok {
		limit := runtime.ConcurrencyMax * len(c.Queues)
		if c.MaxConcurrency, err = at.integer(0, limit, fmt.Sprintf("allowed 0 (no cap) to %d", limit)); err != nil {
			return nil, err
		}
	}
	if at, ok := f.get("mode"); ok {
		m, err := at.oneOf(string(runtime.ModeNotify), string(runtime.ModePoll), string(runtime.ModeWAL))
		if err != nil {
			return nil, err
		}
		c.Mode = runtime.Mode(m)
	}
	durations := []struct {
		key    string
		dst    *time.Duration
		lo, hi time.Duration
	}{
		{"lease", &c.Lease, runtime.LeaseMin, runtime.LeaseMax},
		{"safety_poll", &c.SafetyPoll, runtime.SafetyPollMin, runtime.SafetyPollMax},
		{"poll_min", &c.PollMin, runtime.PollMinMin, runtime.PollMinMax},
	}
	for _, d := range durations {
		if at, ok := f.get(d.key); ok {
			if *d.dst, err = at.duration(d.lo, d.hi); err != nil {
				return nil, err
			}
		}
	}
	// These two are bounded by the ones above, or by their defaults.
	if at, ok := f.get("unhealthy_poll"); ok {
		if c.UnhealthyPoll, err = at.duration(runtime.UnhealthyPollMin, or0(c.SafetyPoll, runtime.SafetyPollDefault)); err != nil {
			return nil, err
		}
	}
	if at, ok := f.get("poll_max"); ok {
		if c.PollMax, err = at.duration(or0(c.PollMin, runtime.PollMinDefault), runtime.SafetyPollMax); err != nil {
			return nil, err
		}
	}
	for _, r := range []struct {
		key string
		dst *time.Duration
	}{{"retention", &c.Retention}, {"dead_retention", &c.DeadRetention}} {
		if at, ok := f.get(r.key); ok {
			if *r.dst, err = retention(at); err != nil {
				return nil, err
			}
		}
	}
	if at, ok := f.get("busy_rate"); ok {
		if s, _ := at.str(); s == "off" {
			c.BusyRate = -1
		} else if c.BusyRate, err = at.integer(1, math.MaxInt32, "allowed 1 and up (jobs a second), or off to always wait for notifications"); err != nil {
			return nil, err
		}
	}
	if at, ok := f.get("exec"); ok {
		if g.execs, err = loadExecs(at); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// or0 returns d, or def when d is zero.
func or0(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// retention reads a retention: a duration above zero, or keep.
func retention(v confNode) (time.Duration, error) {
	if v.isScalar() && resolved(v.n).Value == "keep" {
		return -1, nil
	}
	d, err := v.duration(1, noLimit)
	if err != nil {
		return 0, v.errorf("want a duration above 0 such as 72h, or keep to never delete them; got %s", v.what())
	}
	return d, nil
}

// loadQueues reads queues: a list of names, or of {name, concurrency} for
// a queue with a concurrency of its own.
func loadQueues(f *confFields, c *runtime.Config) error {
	at, ok := f.get("queues")
	if !ok {
		return nil // runtime.Config's default: ["default"]
	}
	items, err := at.items()
	if err != nil {
		return err
	}
	if len(items) == 0 {
		return at.errorf("no queues: list at least one, or leave the key out to work the queue default")
	}
	for _, item := range items {
		nameAt := item
		var own *confFields // {name, concurrency}, for a queue of its own concurrency
		if !item.isScalar() {
			if own, err = item.fields(queueKeys...); err != nil {
				return err
			}
			if nameAt, ok = own.get("name"); !ok {
				return item.errorf("a queue needs a name")
			}
		}
		name, err := nameAt.str()
		if err != nil {
			return err
		}
		if err := channel.ValidateQueue(name); err != nil {
			return nameAt.errorf("%v", err)
		}
		if slices.Contains(c.Queues, name) {
			return nameAt.errorf("queue %s is listed twice", name)
		}
		c.Queues = append(c.Queues, name)
		if own == nil {
			continue
		}
		if n, ok := own.get("concurrency"); ok {
			cc, err := n.integer(1, runtime.ConcurrencyMax, fmt.Sprintf("allowed 1 to %d", runtime.ConcurrencyMax))
			if err != nil {
				return err
			}
			if c.QueueConcurrency == nil {
				c.QueueConcurrency = map[string]int{}
			}
			c.QueueConcurrency[name] = cc
		}
	}
	return nil
}

// loadExecs reads exec: KIND: COMMAND, or KIND: {command, timeout, limit}.
func loadExecs(v confNode) ([]execSpec, error) {
	ps, err := v.pairs()
	if err != nil {
		return nil, err
	}
	var out []execSpec
	for _, p := range ps {
		e := execSpec{name: p.key, at: p.keyAt}
		if err := runtime.ValidateKind(p.key); err != nil {
			return nil, p.keyAt.errorf("%v", err)
		}
		if slices.Contains(builtinKindNames(), p.key) {
			return nil, p.keyAt.errorf("%s is a built-in kind; choose another name", p.key)
		}
		commandAt := p.val
		if !p.val.isScalar() {
			f, err := p.val.fields(execKeys...)
			if err != nil {
				return nil, err
			}
			var ok bool
			if commandAt, ok = f.get("command"); !ok {
				return nil, p.val.errorf("no command: give the command to run for each job of %s", p.key)
			}
			if at, ok := f.get("timeout"); ok {
				if e.timeout, err = at.duration(1, noLimit); err != nil {
					return nil, err
				}
			}
			if at, ok := f.get("limit"); ok {
				if e.limit, err = loadLimit(at); err != nil {
					return nil, err
				}
			}
		}
		if e.command, err = commandAt.str(); err != nil {
			return nil, err
		}
		if strings.TrimSpace(e.command) == "" {
			return nil, commandAt.errorf("is empty")
		}
		out = append(out, e)
	}
	return out, nil
}

// loadLimit reads limit: {max: N, key: dotted.path}.
func loadLimit(v confNode) (*runtime.Limit, error) {
	f, err := v.fields(limitKeys...)
	if err != nil {
		return nil, err
	}
	maxAt, ok := f.get("max")
	if !ok {
		return nil, v.errorf("no max: give how many jobs of one key may run at once")
	}
	l := &runtime.Limit{}
	if l.Max, err = maxAt.integer(1, limitMaxMax, fmt.Sprintf("allowed 1 to %d", limitMaxMax)); err != nil {
		return nil, err
	}
	if at, ok := f.get("key"); ok {
		if l.Key, err = at.str(); err != nil {
			return nil, err
		}
		if err := checkLimitKey(l.Key); err != nil {
			return nil, at.errorf("%v", err)
		}
	}
	return l, nil
}

// checkLimitKey refuses a concurrency key that is not a dotted path.
func checkLimitKey(key string) error {
	if slices.Contains(strings.Split(key, "."), "") || strings.TrimSpace(key) != key {
		return fmt.Errorf("%q: want a dotted path into the payload, such as account or account.id", key)
	}
	return nil
}

// checkSharedLimits refuses a kind limited differently by two groups:
// every worker that handles a limited kind must declare the same limit.
func checkSharedLimits(groups []*groupSpec) error {
	type first struct {
		limit *runtime.Limit
		group string
	}
	seen := map[string]first{}
	for _, g := range groups {
		for _, e := range g.execs {
			f, ok := seen[e.name]
			if !ok {
				seen[e.name] = first{e.limit, g.name}
				continue
			}
			if !sameLimit(f.limit, e.limit) {
				return e.at.errorf("kind %s has another limit in group %s: every worker of a limited kind must declare the same", e.name, f.group)
			}
		}
	}
	return nil
}

func sameLimit(a, b *runtime.Limit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// loadRecurring reads recurring: and hands each task to its group (by
// default the first one), whose runtime schedules it.
func loadRecurring(v confNode, groups []*groupSpec) error {
	items, err := v.items()
	if err != nil {
		return err
	}
	names := map[string]int{}
	for _, item := range items {
		f, err := item.fields(taskKeys...)
		if err != nil {
			return err
		}
		var t runtime.RecurringTask
		required := func(key string) (confNode, string, error) {
			at, ok := f.get(key)
			if !ok {
				return item, "", item.errorf("no %s: a recurring task needs one", key)
			}
			s, err := at.str()
			return at, s, err
		}
		nameAt, name, err := required("name")
		if err != nil {
			return err
		}
		if strings.TrimSpace(name) != name || len(name) > 200 {
			return nameAt.errorf("%q: at most 200 bytes, not starting or ending with a blank", name)
		}
		if line, dup := names[name]; dup {
			return nameAt.errorf("task %s is declared twice (first at line %d)", name, line)
		}
		names[name] = nameAt.n.Line
		t.Name = name
		owner := groups[0]
		if at, ok := f.get("group"); ok {
			gname, err := at.str()
			if err != nil {
				return err
			}
			i := slices.IndexFunc(groups, func(g *groupSpec) bool { return g.name == gname })
			if i < 0 {
				return at.errorf("no group is named %s", gname)
			}
			owner = groups[i]
		}
		kindAt, kind, err := required("kind")
		if err != nil {
			return err
		}
		if err := runtime.ValidateKind(kind); err != nil {
			return kindAt.errorf("%v", err)
		}
		t.Kind = kind
		if at, ok := f.get("queue"); ok {
			if t.Queue, err = at.str(); err != nil {
				return err
			}
			if err := channel.ValidateQueue(t.Queue); err != nil {
				return at.errorf("%v", err)
			}
		}
		if at, ok := f.get("time_zone"); ok {
			if t.TimeZone, err = at.str(); err != nil {
				return err
			}
			if _, err := time.LoadLocation(t.TimeZone); err != nil {
				return at.errorf("%q is not a time zone: use an IANA name such as Europe/Lisbon or UTC", t.TimeZone)
			}
		}
		if at, ok := f.get("max_attempts"); ok {
			if t.MaxAttempts, err = at.integer(1, 1000, "allowed 1 to 1000"); err != nil {
				return err
			}
		}
		if at, ok := f.get("missed"); ok {
			m, err := at.oneOf(string(runtime.MissedLatest), string(runtime.MissedNone))
			if err != nil {
				return err
			}
			t.Missed = runtime.Missed(m)
		}
		if at, ok := f.get("payload"); ok {
			p, err := jsonValue(at)
			if err != nil {
				return err
			}
			b, err := json.Marshal(p)
			if err != nil {
				return at.errorf("cannot be written as JSON: %v", err)
			}
			t.Payload = json.RawMessage(b)
		}
		schedAt, sched, err := required("schedule")
		if err != nil {
			return err
		}
		t.Schedule = sched
		// The runtime's own check, which knows the schedules it reads.
		if err := checkTask(t); err != nil {
			return schedAt.errorf("%s", err)
		}
		owner.cfg.Recurring = append(owner.cfg.Recurring, t)
	}
	return nil
}

// jsonValue converts a YAML value into what encoding/json writes as the
// same value. A date stays the text it was written as, and a key is always
// text, as in JSON.
func jsonValue(v confNode) (any, error) {
	n := resolved(v.n)
	switch n.Kind {
	case yaml.MappingNode:
		ps, err := v.pairs()
		if err != nil {
			return nil, err
		}
		m := make(map[string]any, len(ps))
		for _, p := range ps {
			if m[p.key], err = jsonValue(p.val); err != nil {
				return nil, err
			}
		}
		return m, nil
	case yaml.SequenceNode:
		items, err := v.items()
		if err != nil {
			return nil, err
		}
		list := make([]any, len(items))
		for i, item := range items {
			if list[i], err = jsonValue(item); err != nil {
				return nil, err
			}
		}
		return list, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!str", "!!timestamp", "!!binary":
			return n.Value, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, v.errorf("%s does not fit in 64 bits", n.Value)
			}
			return i, nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
				return nil, v.errorf("%s has no JSON form", n.Value)
			}
			return f, nil
		case "!!bool":
			var b bool
			err := n.Decode(&b)
			return b, err
		}
	}
	return nil, v.errorf("%s has no JSON form", v.what())
}

// checkTask checks a recurring task as runtime.Config.Validate does,
// without the prefixes that name the field and the task: the file's error
// names them already.
func checkTask(t runtime.RecurringTask) error {
	probe := runtime.Config{
		DSN:       "unused",
		Kinds:     []runtime.Kind{{Name: "unused", Handler: func(context.Context, *runtime.Job) error { return nil }}},
		Recurring: []runtime.RecurringTask{t},
	}
	err := probe.WithDefaults().Validate()
	if err == nil {
		return nil
	}
	msg := strings.TrimPrefix(err.Error(), "Recurring: ")
	msg = strings.TrimPrefix(msg, fmt.Sprintf("task %q: ", t.Name))
	return fmt.Errorf("%s", msg)
}
