package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// confError is a mistake in a configuration file: where it is (the file,
// the line, the key) and what is wrong, on one line such as
// "fila.yaml:12: workers[1].concurrency: 0 is out of range: allowed 1 to 10000".
type confError struct {
	file string
	line int    // 0 when the mistake is the file's as a whole
	key  string // the path of keys to the value, "" for the whole file
	msg  string
}

func (e *confError) Error() string {
	where := e.file
	if e.line > 0 {
		where += ":" + strconv.Itoa(e.line)
	}
	if e.key != "" {
		where += ": " + e.key
	}
	return where + ": " + e.msg
}

// yamlLineError matches the errors of the YAML parser, which name a line.
var yamlLineError = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseYAML reads the one YAML document in data. A syntax error names the
// file and its line; a second document is refused rather than ignored.
func parseYAML(file string, data []byte) (confNode, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return confNode{}, &confError{file: file, msg: "the file is empty"}
		}
		if m := yamlLineError.FindStringSubmatch(err.Error()); m != nil {
			line, _ := strconv.Atoi(m[1])
			return confNode{}, &confError{file: file, line: line, msg: m[2]}
		}
		return confNode{}, &confError{file: file, msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		line := 0
		if err == nil {
			line = second.Line
		}
		return confNode{}, &confError{file: file, line: line, msg: "a second YAML document (after ---): keep the whole configuration in one"}
	}
	root := confNode{file: file, n: &doc}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root.n = doc.Content[0]
	}
	if root.isNull() {
		return confNode{}, &confError{file: file, msg: "the file is empty"}
	}
	return root, nil
}

// confNode is one value of a configuration file with the path of keys that
// leads to it, so that whatever is wrong with it names the file, the line
// and the key.
type confNode struct {
	file string
	path string // such as workers[1].exec.resize.timeout; "" for the top
	n    *yaml.Node
}

// errorf returns a confError at v.
func (v confNode) errorf(format string, args ...any) error {
	return &confError{file: v.file, line: v.n.Line, key: v.path, msg: fmt.Sprintf(format, args...)}
}

// resolved follows an alias (*name) to the value it stands for.
func resolved(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func (v confNode) isNull() bool {
	n := resolved(v.n)
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// what names the kind of a value, for "want X, got Y" messages.
func (v confNode) what() string {
	n := resolved(v.n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	switch n.ShortTag() {
	case "!!null":
		return "no value"
	case "!!str":
		return fmt.Sprintf("%q", n.Value)
	}
	return n.Value
}

// simpleKey matches keys that read well after a dot in a path.
var simpleKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func (v confNode) child(key string, n *yaml.Node) confNode {
	p := v.path
	switch {
	case !simpleKey.MatchString(key):
		p += fmt.Sprintf("[%q]", key)
	case p == "":
		p = key
	default:
		p += "." + key
	}
	return confNode{file: v.file, path: p, n: n}
}

// confPair is one key of a mapping and its value.
type confPair struct {
	key   string
	keyAt confNode // the key itself, for errors about the key
	val   confNode
}

// pairs returns the keys of a mapping in the file's order. A key given
// twice is refused: YAML's "the last one wins" hides a mistake. Keys merged
// in with "<<: *anchor" come after the mapping's own, which they never
// override.
func (v confNode) pairs() ([]confPair, error) {
	n := resolved(v.n)
	if n.Kind != yaml.MappingNode {
		return nil, v.errorf("want a mapping of keys to values, got %s", v.what())
	}
	var own, merged []confPair
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.ShortTag() == "!!merge" {
			m, err := v.mergedPairs(val)
			if err != nil {
				return nil, err
			}
			merged = append(merged, m...)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return nil, v.errorf("a key at line %d is not a plain name", k.Line)
		}
		if line, dup := seen[k.Value]; dup {
			return nil, v.child(k.Value, k).errorf("given twice (first at line %d)", line)
		}
		seen[k.Value] = k.Line
		own = append(own, confPair{key: k.Value, keyAt: v.child(k.Value, k), val: v.child(k.Value, val)})
	}
	for _, p := range merged {
		if _, ok := seen[p.key]; !ok {
			seen[p.key] = p.keyAt.n.Line
			own = append(own, p)
		}
	}
	return own, nil
}

// mergedPairs are the pairs "<<" brings in: one mapping, or a list of them
// (the first one's keys win).
func (v confNode) mergedPairs(val *yaml.Node) ([]confPair, error) {
	src := confNode{file: v.file, path: v.path, n: val}
	r := resolved(val)
	if r.Kind == yaml.SequenceNode {
		var out []confPair
		seen := map[string]bool{}
		for _, item := range r.Content {
			ps, err := confNode{file: v.file, path: v.path, n: item}.pairs()
			if err != nil {
				return nil, err
			}
			for _, p := range ps {
				if !seen[p.key] {
					seen[p.key] = true
					out = append(out, p)
				}
			}
		}
		return out, nil
	}
	return src.pairs()
}

// confFields is a mapping whose keys were checked against the ones allowed.
type confFields struct {
	vals map[string]confNode
}

// extensionPrefix starts the keys that fields ignores where known allows
// them ("x-*"): a place for anchors that other values merge in.
const extensionPrefix = "x-"

// fields checks that v is a mapping of known keys, each given once. An
// unknown key is refused with the closest known one, or the list of them.
func (v confNode) fields(known ...string) (*confFields, error) {
	ps, err := v.pairs()
	if err != nil {
		return nil, err
	}
	f := &confFields{vals: map[string]confNode{}}
	for _, p := range ps {
		if strings.HasPrefix(p.key, extensionPrefix) && slices.Contains(known, extensionPrefix+"*") {
			continue
		}
		if !slices.Contains(known, p.key) {
			if near := closest(p.key, known); near != "" {
				return nil, p.keyAt.errorf("unknown key; did you mean %s?", near)
			}
			return nil, p.keyAt.errorf("unknown key; known here: %s", strings.Join(known, ", "))
		}
		f.vals[p.key] = p.val
	}
	return f, nil
}

// get returns the value of key, if the mapping gives one.
func (f *confFields) get(key string) (confNode, bool) {
	v, ok := f.vals[key]
	return v, ok
}

// closest returns the known key at most two edits away from key, if any.
func closest(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(key, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// items returns the elements of a list.
func (v confNode) items() ([]confNode, error) {
	n := resolved(v.n)
	if n.Kind != yaml.SequenceNode {
		return nil, v.errorf("want a list, got %s", v.what())
	}
	out := make([]confNode, len(n.Content))
	for i, item := range n.Content {
		out[i] = confNode{file: v.file, path: fmt.Sprintf("%s[%d]", v.path, i), n: item}
	}
	return out, nil
}

// isScalar reports whether v is a single value (not a list or a mapping).
func (v confNode) isScalar() bool { return resolved(v.n).Kind == yaml.ScalarNode }

// str returns a non-empty single value as text.
func (v confNode) str() (string, error) {
	n := resolved(v.n)
	if n.Kind != yaml.ScalarNode {
		return "", v.errorf("want a single value, got %s", v.what())
	}
	if n.ShortTag() == "!!null" || n.Value == "" {
		return "", v.errorf("is empty")
	}
	return n.Value, nil
}

// integer returns a whole number within [lo, hi]; describe says how the
// range reads in the error ("allowed 1 to 10000").
func (v confNode) integer(lo, hi int, describe string) (int, error) {
	n := resolved(v.n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" {
		return 0, v.errorf("want a whole number, got %s", v.what())
	}
	var x int64
	if err := n.Decode(&x); err != nil || x < math.MinInt32 || x > math.MaxInt32 {
		return 0, v.errorf("%s is out of range: %s", n.Value, describe)
	}
	if int(x) < lo || int(x) > hi {
		return 0, v.errorf("%d is out of range: %s", x, describe)
	}
	return int(x), nil
}

// noLimit is a duration range's open upper end.
const noLimit = time.Duration(math.MaxInt64)

// duration returns a duration written with its unit ("30s", "1m30s",
// "250ms") within [lo, hi]; hi may be noLimit, and lo 1 for "above 0".
func (v confNode) duration(lo, hi time.Duration) (time.Duration, error) {
	n := resolved(v.n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		return 0, v.errorf("want a duration such as 30s, got %s", v.what())
	}
	d, err := time.ParseDuration(n.Value)
	if err != nil {
		return 0, v.errorf("%q is not a duration: write a number and its unit, such as 500ms, 30s or 2m", n.Value)
	}
	switch {
	case d >= lo && d <= hi:
	case hi != noLimit:
		return 0, v.errorf("%s is out of range: allowed %s to %s", n.Value, lo, hi)
	case lo == 1:
		return 0, v.errorf("%s is out of range: must be above 0", n.Value)
	default:
		return 0, v.errorf("%s is out of range: must be at least %s", n.Value, lo)
	}
	return d, nil
}

// oneOf returns a value that must be one of choices.
func (v confNode) oneOf(choices ...string) (string, error) {
	s, err := v.str()
	if err != nil {
		return "", err
	}
	if !slices.Contains(choices, s) {
		return "", v.errorf("%q is not one of %s", s, strings.Join(choices, ", "))
	}
	return s, nil
}

// envReference matches a value that is only a reference to an environment
// variable: ${NAME} or $NAME.
var envReference = regexp.MustCompile(`^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))$`)

// secret returns the value of the environment variable v refers to. A
// literal value is refused, so that no password is ever written in the
// file; so is a variable that is not set or is empty.
func (v confNode) secret(getenv func(string) (string, bool), example string) (string, error) {
	s, err := v.str()
	if err != nil {
		return "", err
	}
	m := envReference.FindStringSubmatch(s)
	if m == nil {
		return "", v.errorf("give a reference to an environment variable, such as ${%s}, not the value itself: secrets stay out of this file", example)
	}
	name := m[1] + m[2]
	val, ok := getenv(name)
	switch {
	case !ok:
		return "", v.errorf("environment variable %s is not set", name)
	case val == "":
		return "", v.errorf("environment variable %s is empty", name)
	}
	return val, nil
}
