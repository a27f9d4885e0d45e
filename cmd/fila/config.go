package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fila-run/fila/internal/channel"
	"github.com/fila-run/fila/internal/pgconfig"
	"github.com/fila-run/fila/internal/ui"
	"github.com/fila-run/fila/runtime"
)

// The configuration of `fila work`, from its flags (one worker group) or
// from the file of --config (several), is read into one model, workConfig,
// by the readers of settings; then one validation, check, finds every
// mistake, naming the flag or the file's line and key the user wrote; and
// only then is it turned into runtime.Configs, which runtime.New should
// find nothing wrong with.
//
// The file declares every worker group of one process, its recurring
// tasks and what the process serves; docs/fila.example.yaml shows and
// explains every key, and the tests load it. Its top holds the process's
// settings, workers: [group …], recurring: [task …], and keys starting
// with x-, which are ignored: anchors for the groups to merge in.

// shutdownTimeoutDefault is --shutdown-timeout's default.
const shutdownTimeoutDefault = 30 * time.Second

// groupName is what a worker group may be called: it appears in logs and
// errors, so plain words only.
var groupName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,63}$`)

// workConfig is what one `fila work` runs and serves.
type workConfig struct {
	file  string           // the configuration file; "" for flags
	given map[string]value // the process's settings given, by key
	// The process's settings; dsn, listenDSN and schema "" where not given.
	dsn, listenDSN, schema          string
	shutdown                        time.Duration
	metricsAddr, healthAddr, uiAddr string
	uiAccess                        uiAccess
	otel                            bool
	groups                          []*groupSpec
}

// groupSpec is one worker group: one runtime.
type groupSpec struct {
	name   string
	at     origin           // where the group is declared
	given  map[string]value // its settings given, by key
	queues []queueSpec
	execs  []execSpec
	// cfg is what was given, less the DSNs it does not set, Kinds,
	// Observer and Logger.
	cfg runtime.Config
}

// queueSpec is a queue of a group, and the concurrency of its own, if any.
type queueSpec struct {
	name        string
	at          origin
	concurrency *value
}

// execSpec is a kind run by a command.
type execSpec struct {
	name, command      string
	at, commandAt      origin // the kind, its command
	timeout            *value // nil: none
	limitMax, limitKey *value // nil: no limit; one key for the kind
	// nil: no rate limit; one key for the kind
	rateMax, ratePeriod, rateKey *value
}

func (e execSpec) kindTimeout() time.Duration {
	if e.timeout == nil {
		return 0
	}
	return time.Duration(e.timeout.n)
}

func (e execSpec) kindLimit() *runtime.Limit {
	if e.limitMax == nil {
		return nil
	}
	l := &runtime.Limit{Max: int(e.limitMax.n)}
	if e.limitKey != nil {
		l.Key = e.limitKey.s
	}
	return l
}

func (e execSpec) kindRateLimit() *runtime.RateLimit {
	if e.rateMax == nil || e.ratePeriod == nil {
		return nil
	}
	l := &runtime.RateLimit{Max: int(e.rateMax.n), Period: time.Duration(e.ratePeriod.n)}
	if e.rateKey != nil {
		l.Key = e.rateKey.s
	}
	return l
}

// readFlags reads `fila work`'s flags, args by flag name, as one group.
func readFlags(args map[string]*flagArgs) (*workConfig, error) {
	var p problems
	g := &groupSpec{given: map[string]value{}}
	w := &workConfig{given: map[string]value{}, groups: []*groupSpec{g}}
	for _, s := range settings {
		a := args[s.flag]
		switch {
		case a == nil || len(a.args) == 0:
		case s.read != nil:
			// The last one given wins, as with any flag.
			at := origin{flag: "--" + s.flag}
			v, err := s.read(raw{text: a.args[len(a.args)-1]})
			if err != nil {
				p.add(at.errorf("%v", err))
				continue
			}
			v.at = at
			if s.top {
				w.given[s.key] = v
			} else {
				g.given[s.key] = v
			}
		default:
			for _, arg := range a.args {
				at := origin{flag: "--" + s.flag + " " + shellWord(arg)}
				switch s.key {
				case keyQueues:
					if q, ok := flagQueue(arg, at, &p); ok {
						g.queues = append(g.queues, q)
					}
				case keyExec:
					kind, command, ok := strings.Cut(arg, "=")
					if !ok || strings.TrimSpace(command) == "" {
						p.add(at.errorf("want KIND=COMMAND"))
						continue
					}
					g.execs = append(g.execs, execSpec{name: kind, command: command, at: at, commandAt: at})
				default: // keyTimeout, keyLimit, keyRateLimit
					flagKindSetting(g, s.key, arg, at, &p)
				}
			}
		}
	}
	w.resolve()
	p.add(w.check())
	return w, p.err()
}

// shellWord is arg as a command line would give it: quoted if empty or
// holding a blank, a quote or a control character.
func shellWord(arg string) string {
	if arg == "" || strings.IndexFunc(arg, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`"'\`, r) }) >= 0 {
		return strconv.Quote(arg)
	}
	return arg
}

// flagQueue reads --queue QUEUE or QUEUE=N.
func flagQueue(arg string, at origin, p *problems) (queueSpec, bool) {
	name, n, given := strings.Cut(arg, "=")
	q := queueSpec{name: name, at: at}
	if given {
		c, err := readInt(raw{text: n})
		if err != nil {
			p.add(at.errorf("want QUEUE or QUEUE=N, N the jobs of QUEUE run at once, such as mail=5"))
			return q, false
		}
		c.at = at
		q.concurrency = &c
	}
	return q, true
}

// flagKindSetting reads --timeout KIND=DURATION, --limit KIND=N[:PATH] or
// --rate-limit KIND=N/PERIOD[:PATH] into the kind that --exec gives.
func flagKindSetting(g *groupSpec, key, arg string, at origin, p *problems) {
	kind, spec, ok := strings.Cut(arg, "=")
	var v, period value
	var err error
	switch key {
	case keyTimeout:
		if v, err = readDuration(raw{text: spec}); !ok {
			err = errors.New("want KIND=DURATION such as resize=30s")
		}
	case keyRateLimit:
		n, rest, slash := strings.Cut(spec, "/")
		d, _, _ := strings.Cut(rest, ":")
		v, err = readInt(raw{text: n})
		if err == nil {
			period, err = readDuration(raw{text: d})
		}
		if !ok || !slash || err != nil {
			err = errors.New("want KIND=N/PERIOD or KIND=N/PERIOD:PATH such as charge=10/1s:account.id")
		}
	default:
		n, _, _ := strings.Cut(spec, ":")
		if v, err = readInt(raw{text: n}); !ok || err != nil {
			err = errors.New("want KIND=N or KIND=N:PATH such as charge=2:account.id")
		}
	}
	if err != nil {
		p.add(at.errorf("%v", err))
		return
	}
	v.at = at
	i := slices.IndexFunc(g.execs, func(e execSpec) bool { return e.name == kind })
	switch {
	case i < 0 && slices.Contains(builtinKindNames(), kind):
		p.add(at.errorf("%s is a built-in kind: a timeout or a limit is for a kind given with --exec", kind))
	case i < 0:
		p.add(at.errorf("no kind %q is handled (add --exec %s=COMMAND)", kind, kind))
	case key == keyTimeout && g.execs[i].timeout != nil, key == keyLimit && g.execs[i].limitMax != nil,
		key == keyRateLimit && g.execs[i].rateMax != nil:
		p.add(at.errorf("kind %s is given twice", kind))
	case key == keyTimeout:
		g.execs[i].timeout = &v
	case key == keyRateLimit:
		period.at = at
		g.execs[i].rateMax, g.execs[i].ratePeriod = &v, &period
		if _, path, hasPath := strings.Cut(spec, ":"); hasPath {
			g.execs[i].rateKey = &value{s: path, text: path, at: at}
		}
	default:
		g.execs[i].limitMax = &v
		if _, path, hasPath := strings.Cut(spec, ":"); hasPath {
			g.execs[i].limitKey = &value{s: path, text: path, at: at}
		}
	}
}

// loadWorkFile reads a configuration file; getenv resolves its ${VAR}
// references.
func loadWorkFile(path string, getenv func(string) (string, bool)) (*workConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	root, err := parseYAML(path, data)
	if err != nil {
		return nil, err
	}
	var p problems
	w := &workConfig{file: path, given: map[string]value{}}
	top, err := root.fields(append(settingKeys(true), "workers", extensionPrefix+"*")...)
	if p.add(err); top == nil {
		return nil, p.err()
	}
	readSettings(top, true, w.given, getenv, &p)
	var items []confNode
	if workers, ok := top.get("workers"); !ok {
		p.add(root.errorf("no workers: declare at least one group under workers:"))
	} else if items, err = workers.items(); !p.add(err) && len(items) == 0 {
		p.add(workers.errorf("no groups: declare at least one"))
	}
	for _, item := range items {
		g := readGroup(item, getenv, &p)
		if g == nil {
			continue
		}
		if i := slices.IndexFunc(w.groups, func(o *groupSpec) bool { return o.name == g.name }); i >= 0 && g.name != "" {
			p.add(item.errorf("group %s is declared twice (first at line %d)", g.name, w.groups[i].at.node.n.Line))
			continue
		}
		w.groups = append(w.groups, g)
	}
	if v, ok := top.get(keyRecurring); ok && len(w.groups) > 0 {
		readRecurring(v, w.groups, &p)
	}
	w.resolve()
	p.add(w.check())
	return w, p.err()
}

// readSettings reads the single-valued settings of the file's top (top),
// or of a group.
func readSettings(f *confFields, top bool, given map[string]value, getenv func(string) (string, bool), p *problems) {
	for _, s := range settings {
		if at, ok := f.get(s.key); ok && s.read != nil && (top && s.top || !top && s.group) {
			if v, err := at.read(s.read, getenv); !p.add(err) {
				given[s.key] = v
			}
		}
	}
}

// readGroup reads one entry of workers:.
func readGroup(v confNode, getenv func(string) (string, bool), p *problems) *groupSpec {
	f, err := v.fields(settingKeys(false)...)
	if p.add(err); f == nil {
		return nil
	}
	g := &groupSpec{at: origin{node: v}, given: map[string]value{}}
	if at, ok := f.get("name"); !ok {
		p.add(v.errorf("a group needs a name (it names the group in logs and errors)"))
	} else if name, err := at.text(); !p.add(err) {
		if !groupName.MatchString(name) {
			p.add(at.errorf("%q: use 1 to 63 letters, digits, '_', '.' and '-'", name))
		}
		g.name = name
	}
	readSettings(f, false, g.given, getenv, p)
	if at, ok := f.get(keyQueues); ok {
		g.queues = readQueues(at, p)
	}
	if at, ok := f.get(keyExec); ok {
		g.execs = readExecs(at, p)
	}
	return g
}

// readQueues reads queues: a list of names, or of {name, concurrency} for
// a queue with a concurrency of its own.
func readQueues(v confNode, p *problems) []queueSpec {
	items, err := v.items()
	if p.add(err) {
		return nil
	}
	if len(items) == 0 {
		p.add(v.errorf("no queues: list at least one, or leave the key out to work the queue default"))
	}
	var out []queueSpec
	for _, item := range items {
		var q queueSpec
		nameAt := item
		if !item.isScalar() {
			f, err := item.fields("name", "concurrency")
			if p.add(err); f == nil {
				continue
			}
			var ok bool
			if nameAt, ok = f.get("name"); !ok {
				p.add(item.errorf("a queue needs a name"))
				continue
			}
			if at, ok := f.get("concurrency"); ok {
				c, err := at.read(readInt, nil)
				if p.add(err) {
					continue
				}
				q.concurrency = &c
			}
		}
		name, err := nameAt.text()
		if p.add(err) {
			continue
		}
		q.name, q.at = name, origin{node: nameAt}
		out = append(out, q)
	}
	return out
}

// readExecs reads exec: KIND: COMMAND, or KIND: {command, timeout, limit,
// rate_limit}.
func readExecs(v confNode, p *problems) []execSpec {
	ps, err := v.pairs()
	if p.add(err) {
		return nil
	}
	var out []execSpec
	for _, kv := range ps {
		e := execSpec{name: kv.key, at: origin{node: kv.keyAt}}
		commandAt := kv.val
		if !kv.val.isScalar() {
			f, err := kv.val.fields("command", "timeout", "limit", "rate_limit")
			if p.add(err); f == nil {
				continue
			}
			var ok bool
			if commandAt, ok = f.get("command"); !ok {
				p.add(kv.val.errorf("no command: give the command to run for each job of %s", kv.key))
				continue
			}
			if at, ok := f.get("timeout"); ok {
				if t, err := at.read(readDuration, nil); !p.add(err) {
					e.timeout = &t
				}
			}
			if at, ok := f.get("limit"); ok {
				readLimit(at, &e, p)
			}
			if at, ok := f.get("rate_limit"); ok {
				readRateLimit(at, &e, p)
			}
		}
		command, err := commandAt.text()
		if p.add(err) {
			continue
		}
		e.command, e.commandAt = command, origin{node: commandAt}
		out = append(out, e)
	}
	return out
}

// readLimit reads limit: {max: N, key: dotted.path}.
func readLimit(v confNode, e *execSpec, p *problems) {
	f, err := v.fields("max", "key")
	if p.add(err); f == nil {
		return
	}
	maxAt, ok := f.get("max")
	if !ok {
		p.add(v.errorf("no max: give how many jobs of one key may run at once"))
		return
	}
	if m, err := maxAt.read(readInt, nil); !p.add(err) {
		e.limitMax = &m
	}
	if at, ok := f.get("key"); ok {
		if k, err := at.read(readText, nil); !p.add(err) {
			e.limitKey = &k
		}
	}
}

// readRateLimit reads rate_limit: {max: N, period: DURATION, key: dotted.path}.
func readRateLimit(v confNode, e *execSpec, p *problems) {
	f, err := v.fields("max", "period", "key")
	if p.add(err); f == nil {
		return
	}
	maxAt, ok := f.get("max")
	if !ok {
		p.add(v.errorf("no max: give how many jobs of one key may start per period"))
		return
	}
	periodAt, ok := f.get("period")
	if !ok {
		p.add(v.errorf("no period: give the window the starts are counted in, such as 1s"))
		return
	}
	m, errMax := maxAt.read(readInt, nil)
	d, errPeriod := periodAt.read(readDuration, nil)
	if !p.add(errMax) && !p.add(errPeriod) {
		e.rateMax, e.ratePeriod = &m, &d
	}
	if at, ok := f.get("key"); ok {
		if k, err := at.read(readText, nil); !p.add(err) {
			e.rateKey = &k
		}
	}
}

// resolve sets the values of the process's settings and each group's
// runtime.Config from what was given.
func (w *workConfig) resolve() {
	w.dsn, w.listenDSN, w.schema = w.given["dsn"].s, w.given["listen_dsn"].s, w.given["schema"].s
	w.shutdown = shutdownTimeoutDefault
	if v, ok := w.given["shutdown_timeout"]; ok {
		w.shutdown = time.Duration(v.n)
	}
	w.metricsAddr, w.healthAddr, w.uiAddr = w.given["metrics_addr"].s, w.given["health_addr"].s, w.given["ui_addr"].s
	w.otel = w.given["otel"].n == 1
	// The tokens left out are taken from the environment when the process
	// starts (uiAccess.resolve); each names where it came from.
	a := &w.uiAccess
	a.adminFrom, a.readFrom = "$"+ui.AdminTokenEnv, "$"+ui.ReadTokenEnv
	if v := w.given["ui_admin_token"]; v.s != "" {
		a.adminToken, a.adminFrom = v.s, v.at.label()
	}
	if v := w.given["ui_read_token"]; v.s != "" {
		a.readToken, a.readFrom = v.s, v.at.label()
	}
	if v, ok := w.given["ui_public_read"]; ok {
		a.publicRead, a.publicFrom = optionalBool{value: v.n == 1, set: true}, v.at.label()
	}
	for _, g := range w.groups {
		cfg := reflect.ValueOf(&g.cfg).Elem()
		for key, v := range g.given {
			if f := cfg.FieldByName(lookupSetting(key).field); f.Kind() == reflect.String {
				f.SetString(v.s)
			} else {
				f.SetInt(v.n)
			}
		}
		for _, q := range g.queues {
			g.cfg.Queues = append(g.cfg.Queues, q.name)
			if q.concurrency != nil {
				if g.cfg.QueueConcurrency == nil {
					g.cfg.QueueConcurrency = map[string]int{}
				}
				g.cfg.QueueConcurrency[q.name] = int(q.concurrency.n)
			}
		}
	}
}

// check is the one validation of a configuration, from flags or a file:
// it returns every mistake, each naming the flag or the file's line and
// key, and leaves nothing for runtime.New to refuse.
func (w *workConfig) check() error {
	var p problems
	checkGiven(w.given, runtime.Config{}, &p)
	for _, g := range w.groups {
		g.check(&p)
	}
	checkKinds(w.groups, &p)
	w.checkAddrs(&p)
	for _, key := range []string{"ui_admin_token", "ui_read_token", "ui_public_read"} {
		if v, ok := w.given[key]; ok && w.uiAddr == "" {
			what := "protect"
			if key == "ui_public_read" {
				what = "open"
			}
			p.add(v.at.errorf("there is no dashboard to %s: set %s too", what, v.at.name("ui_addr")))
		}
	}
	return p.err()
}

// checkGiven checks each value given with its setting's check, in c.
func checkGiven(given map[string]value, c runtime.Config, p *problems) {
	for _, s := range settings {
		if v, ok := given[s.key]; ok && s.check != nil {
			if msg := s.check(v, c, v.at.name); msg != "" {
				p.add(v.at.errorf("%s", msg))
			}
		}
	}
}

// check checks a group: its settings in its own configuration (whose
// ranges may depend on one another), its queues and its kinds.
func (g *groupSpec) check(p *problems) {
	c := g.cfg.WithDefaults()
	checkGiven(g.given, c, p)
	seen := map[string]bool{}
	for _, q := range g.queues {
		if err := channel.ValidateQueue(q.name); err != nil {
			p.add(q.at.errorf("%v", err))
		} else if seen[q.name] {
			p.add(q.at.errorf("queue %s is listed twice", q.name))
		}
		seen[q.name] = true
		if q.concurrency != nil {
			if msg := wholeIn(1, runtime.ConcurrencyMax)(*q.concurrency, c, nil); msg != "" {
				p.add(q.concurrency.at.errorf("%s", msg))
			}
		}
	}
	kinds := map[string]bool{}
	for _, e := range g.execs {
		switch err := runtime.ValidateKind(e.name); {
		case err != nil:
			p.add(e.at.errorf("%v", err))
		case slices.Contains(builtinKindNames(), e.name):
			p.add(e.at.errorf("%s is a built-in kind; choose another name", e.name))
		case kinds[e.name]:
			p.add(e.at.errorf("kind %s is given twice", e.name))
		}
		kinds[e.name] = true
		if strings.TrimSpace(e.command) == "" {
			p.add(e.commandAt.errorf("is empty"))
		}
		if e.timeout != nil {
			if msg := atLeast(1, "")(*e.timeout, c, nil); msg != "" {
				p.add(e.timeout.at.errorf("%s", msg))
			}
		}
		if e.limitMax != nil {
			if msg := wholeIn(1, runtime.LimitMaxMax)(*e.limitMax, c, nil); msg != "" {
				p.add(e.limitMax.at.errorf("%s", msg))
			}
		}
		if e.limitKey != nil {
			if err := checkLimitKey(e.limitKey.s); err != nil {
				p.add(e.limitKey.at.errorf("%v", err))
			}
		}
		if e.rateMax != nil {
			if msg := wholeIn(1, runtime.LimitMaxMax)(*e.rateMax, c, nil); msg != "" {
				p.add(e.rateMax.at.errorf("%s", msg))
			}
		}
		if e.ratePeriod != nil {
			if msg := durations(runtime.RatePeriodMin, runtime.RatePeriodMax)(*e.ratePeriod, c, nil); msg != "" {
				p.add(e.ratePeriod.at.errorf("%s", msg))
			}
		}
		if e.rateKey != nil {
			if err := checkLimitKey(e.rateKey.s); err != nil {
				p.add(e.rateKey.at.errorf("%v", err))
			}
		}
	}
}

// checkLimitKey refuses a concurrency key that is not a dotted path.
func checkLimitKey(key string) error {
	if slices.Contains(strings.Split(key, "."), "") || strings.TrimSpace(key) != key {
		return fmt.Errorf("%q: want a dotted path into the payload, such as account or account.id", key)
	}
	return nil
}

// checkKinds refuses what two groups would leave to chance: a kind limited
// otherwise in another group (every worker of a limited kind must declare
// the same limit), and a kind run otherwise on a queue another group works
// too (which group claims a job would decide how it runs).
func checkKinds(groups []*groupSpec, p *problems) {
	for i, g := range groups {
		for _, e := range g.execs {
			for _, other := range groups[:i] {
				j := slices.IndexFunc(other.execs, func(o execSpec) bool { return o.name == e.name })
				if j < 0 {
					continue
				}
				o := other.execs[j]
				q := sharedQueue(g.cfg.WithDefaults().Queues, other.cfg.WithDefaults().Queues)
				if !sameLimit(o.kindLimit(), e.kindLimit()) || !sameRateLimit(o.kindRateLimit(), e.kindRateLimit()) {
					p.add(e.at.errorf("kind %s has another limit in group %s: every worker of a limited kind must declare the same", e.name, other.name))
				} else if q != "" && (o.command != e.command || o.kindTimeout() != e.kindTimeout()) {
					p.add(e.at.errorf("kind %s runs otherwise in group %s, which works queue %s too: which group claims a job would decide how it runs; give both the same command and timeout", e.name, other.name, q))
				} else {
					continue
				}
				break
			}
		}
	}
}

// sharedQueue is a queue in both a and b, "" if none.
func sharedQueue(a, b []string) string {
	for _, q := range a {
		if slices.Contains(b, q) {
			return q
		}
	}
	return ""
}

func sameRateLimit(a, b *runtime.RateLimit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func sameLimit(a, b *runtime.Limit) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// checkAddrs refuses addresses that cannot all be listened on: /metrics,
// the health endpoints and the dashboard each need their own, except that
// metrics and health may be given the same one, which one server answers.
func (w *workConfig) checkAddrs(p *problems) {
	keys := []string{"metrics_addr", "health_addr", "ui_addr"}
	for i, a := range keys {
		va := w.given[a]
		for _, b := range keys[:i] {
			vb := w.given[b]
			if va.s == "" || vb.s == "" || (a == "health_addr" && va.s == vb.s) || !overlap(va.s, vb.s) {
				continue
			}
			what := fmt.Sprintf("%s is %s's too", va.s, va.at.name(b))
			if va.s != vb.s {
				what = fmt.Sprintf("%s takes the port of %s %s", va.s, va.at.name(b), vb.s)
			}
			p.add(va.at.errorf("%s: one of them could not listen; only %s and %s may share an address (the same one)",
				what, va.at.name(keys[0]), va.at.name(keys[1])))
		}
	}
}

// overlap reports whether listening on a would keep b from being listened
// on: the same port (not 0, which picks a free one) on the same host, or
// on every host.
func overlap(a, b string) bool {
	ha, pa, _ := net.SplitHostPort(a)
	hb, pb, _ := net.SplitHostPort(b)
	every := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return pa == pb && pa != "0" && (ha == hb || every(ha) || every(hb))
}

// process resolves the connections, from the flags, the environment or the
// file, and the handlers: what runProcess runs.
func (w *workConfig) process(g *globals, stdout io.Writer) (*workProcess, error) {
	// A connection the file sets is not also given on the command line:
	// which one wins would be a guess. A listen DSN the command line gives
	// stands beside the file's dsn.
	dsn, listenDSN := g.mainDSN(), g.listenerDSN()
	if w.dsn != "" {
		if g.dsn != "" {
			return nil, fmt.Errorf("--dsn cannot be combined with a configuration file that sets dsn (%s)", w.file)
		}
		dsn, listenDSN = w.dsn, or(g.listenDSN, w.dsn)
	}
	if w.listenDSN != "" {
		if g.listenDSN != "" {
			return nil, fmt.Errorf("--listen-dsn cannot be combined with a configuration file that sets listen_dsn (%s)", w.file)
		}
		listenDSN = w.listenDSN
	}
	schema := g.schema
	if w.schema != "" {
		if g.schema != "" {
			return nil, fmt.Errorf("--schema cannot be combined with a configuration file that sets schema (%s)", w.file)
		}
		schema = w.schema
	}
	p := &workProcess{
		dsn: dsn, schema: schema, shutdown: w.shutdown,
		metricsAddr: w.metricsAddr, healthAddr: w.healthAddr, uiAddr: w.uiAddr, uiAccess: w.uiAccess, otel: w.otel,
		names: func(keys ...string) string {
			names := slices.Clone(keys)
			for i, k := range keys {
				if w.file == "" {
					names[i] = flagName(k)
				}
			}
			if w.file == "" {
				return strings.Join(names, " and ")
			}
			return w.file + ": " + strings.Join(names, " and ")
		},
	}
	var errs problems
	for _, gs := range w.groups {
		// Where a group's connection comes from, for errors.
		where := func(key string) origin {
			for _, given := range []map[string]value{gs.given, w.given} {
				if v, ok := given[key]; ok && v.s != "" {
					return v.at
				}
			}
			return origin{flag: flagName(key)}
		}
		cfg := gs.cfg
		if cfg.DSN == "" {
			cfg.DSN = dsn
		} else if cfg.ListenDSN == "" {
			cfg.ListenDSN = cfg.DSN
		}
		if cfg.ListenDSN == "" {
			cfg.ListenDSN = listenDSN
		}
		if cfg.Schema == "" {
			cfg.Schema = schema
		}
		if cfg.DSN == "" && w.file != "" {
			errs.add(gs.at.errorf("group %s has no database: set dsn in the file (as ${FILA_DSN}), or give --dsn, $FILA_DSN or $DATABASE_URL", gs.name))
		} else if cfg.DSN == "" {
			errs.add(errors.New("no database: give --dsn, or set $FILA_DSN or $DATABASE_URL"))
		} else if _, err := pgconfig.Pool(cfg.DSN); err != nil {
			errs.add(where("dsn").errorf("%v", err))
		}
		if cfg.ListenDSN != cfg.DSN {
			if _, err := pgconfig.Conn(cfg.ListenDSN); err != nil {
				errs.add(where("listen_dsn").errorf("%v", err))
			}
		}
		cfg.Kinds = execKinds(gs.execs, stdout)
		gp := groupPlan{name: gs.name, cfg: cfg}
		if w.file != "" {
			gp.at = &gs.at.node
		}
		p.groups = append(p.groups, gp)
	}
	return p, errs.err()
}

// readRecurring reads recurring: and hands each task to its group (by
// default the first one), whose runtime schedules it.
func readRecurring(v confNode, groups []*groupSpec, p *problems) {
	items, err := v.items()
	if p.add(err) {
		return
	}
	names := map[string]int{}
	for _, item := range items {
		p.add(readTask(item, groups, names))
	}
}

// readTask reads one recurring task; names holds the line of each task's
// name read before.
func readTask(item confNode, groups []*groupSpec, names map[string]int) error {
	f, err := item.fields("name", "group", "schedule", "time_zone", "kind", "queue", "payload", "max_attempts", "missed",
		"priority", "tags", "unique_key", "run_on_start")
	if err != nil {
		return err
	}
	var t runtime.RecurringTask
	required := func(key string) (confNode, string, error) {
		at, ok := f.get(key)
		if !ok {
			return item, "", item.errorf("no %s: a recurring task needs one", key)
		}
		s, err := at.text()
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
		gname, err := at.text()
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
		if t.Queue, err = at.text(); err != nil {
			return err
		}
		if err := channel.ValidateQueue(t.Queue); err != nil {
			return at.errorf("%v", err)
		}
	}
	if at, ok := f.get("time_zone"); ok {
		if t.TimeZone, err = at.text(); err != nil {
			return err
		}
		if _, err := time.LoadLocation(t.TimeZone); err != nil {
			return at.errorf("%q is not a time zone: use an IANA name such as Europe/Lisbon or UTC", t.TimeZone)
		}
	}
	if at, ok := f.get("max_attempts"); ok {
		n, err := at.read(readInt, nil)
		if err != nil {
			return err
		}
		if msg := wholeIn(1, 1000)(n, runtime.Config{}, nil); msg != "" {
			return at.errorf("%s", msg)
		}
		t.MaxAttempts = int(n.n)
	}
	if at, ok := f.get("missed"); ok {
		m, err := at.read(readChoice(string(runtime.MissedLatest), string(runtime.MissedNone)), nil)
		if err != nil {
			return err
		}
		t.Missed = runtime.Missed(m.s)
	}
	if at, ok := f.get("priority"); ok {
		n, err := at.read(readInt, nil)
		if err != nil {
			return err
		}
		if msg := wholeIn(math.MinInt16, math.MaxInt16)(n, runtime.Config{}, nil); msg != "" {
			return at.errorf("%s", msg)
		}
		t.Priority = int16(n.n)
	}
	if at, ok := f.get("tags"); ok {
		tags, err := at.items()
		if err != nil {
			return err
		}
		for _, tag := range tags {
			s, err := tag.text()
			if err != nil {
				return err
			}
			t.Tags = append(t.Tags, s)
		}
	}
	if at, ok := f.get("unique_key"); ok {
		if t.UniqueKey, err = at.text(); err != nil {
			return err
		}
	}
	if at, ok := f.get("run_on_start"); ok {
		b, err := at.read(readBool, nil)
		if err != nil {
			return err
		}
		t.RunOnStart = b.n == 1
	}
	if at, ok := f.get("payload"); ok {
		pl, err := jsonValue(at)
		if err != nil {
			return err
		}
		b, err := json.Marshal(pl)
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
