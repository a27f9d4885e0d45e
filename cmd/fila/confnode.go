package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// confError is a mistake in a configuration: where it is (the file, the
// line, the key; or the flag) and what is wrong, on one line such as
// "fila.yaml:12: workers[1].concurrency: 0 is out of range: allowed 1 to
// 10000", or "--concurrency: 0 is out of range: allowed 1 to 10000".
type confError struct {
	file string // "" for a flag
	line int    // 0 when the mistake is the file's as a whole
	key  string // the path of keys to the value, "" for the whole file; or the flag
	msg  string
}

func (e *confError) Error() string {
	var where []string
	if e.file != "" {
		where = append(where, e.file)
		if e.line > 0 {
			where[0] += ":" + strconv.Itoa(e.line)
		}
	}
	if e.key != "" {
		where = append(where, e.key)
	}
	return strings.Join(append(where, e.msg), ": ")
}

// origin is where a value was written: a flag and its argument, or a
// value of the file.
type origin struct {
	flag string // such as --lease or --queue mail=5; "" in a file
	node confNode
}

func (o origin) errorf(format string, args ...any) error {
	if o.flag != "" {
		return &confError{key: o.flag, msg: fmt.Sprintf(format, args...)}
	}
	return o.node.errorf(format, args...)
}

// label names where o is, as its errors do: --admin-token, or
// fila.yaml:7: ui_admin_token.
func (o origin) label() string { return strings.TrimSuffix(o.errorf("").Error(), ": ") }

// name is how the user calls the setting of key where o was written.
func (o origin) name(key string) string {
	if o.flag != "" {
		return flagName(key)
	}
	return key
}

// errorList is every mistake of a configuration, in the file's order;
// fila prints each on a line of its own.
type errorList []error

func (l errorList) Error() string {
	lines := make([]string, len(l))
	for i, err := range l {
		lines[i] = err.Error()
	}
	return strings.Join(lines, "\n")
}

// problems collects mistakes, to report them all at once.
type problems struct{ errs errorList }

// add records err, if any, and reports whether there was one.
func (p *problems) add(err error) bool {
	var list errorList
	switch {
	case err == nil:
		return false
	case errors.As(err, &list):
		p.errs = append(p.errs, list...)
	default:
		p.errs = append(p.errs, err)
	}
	return true
}

func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	line := func(err error) int {
		var ce *confError
		if errors.As(err, &ce) {
			return ce.line
		}
		return 0
	}
	sort.SliceStable(p.errs, func(i, j int) bool { return line(p.errs[i]) < line(p.errs[j]) })
	return p.errs
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
			if tab := tabIndented(data); tab > 0 && (strings.Contains(m[2], "tab") || strings.Contains(m[2], "cannot start any token")) {
				return confNode{}, &confError{file: file, line: tab, msg: "a tab indents this line: YAML indents with spaces only"}
			}
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

// tabIndented returns the first line (from 1) whose indentation, list
// dashes included, holds a tab; 0 if none does. The parser names the tab
// obscurely, and sometimes at the line before.
func tabIndented(data []byte) int {
	for i, line := range strings.Split(string(data), "\n") {
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t-"))]
		if strings.Contains(indent, "\t") {
			return i + 1
		}
	}
	return 0
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
func (v confNode) what() string { return describeNode(resolved(v.n)) }

func describeNode(n *yaml.Node) string {
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

// fields checks that v is a mapping of known keys, each given once. Each
// unknown key is an error naming the closest known one, or the list of
// them; the known keys are returned all the same (nil if v is no mapping).
func (v confNode) fields(known ...string) (*confFields, error) {
	ps, err := v.pairs()
	if err != nil {
		return nil, err
	}
	f := &confFields{vals: map[string]confNode{}}
	var unknown errorList
	for _, p := range ps {
		if strings.HasPrefix(p.key, extensionPrefix) && slices.Contains(known, extensionPrefix+"*") {
			continue
		}
		switch near := closest(p.key, known); {
		case slices.Contains(known, p.key):
			f.vals[p.key] = p.val
		case near != "":
			unknown = append(unknown, p.keyAt.errorf("unknown key; did you mean %s?", near))
		default:
			unknown = append(unknown, p.keyAt.errorf("unknown key; known here: %s", strings.Join(known, ", ")))
		}
	}
	if len(unknown) > 0 {
		return f, unknown
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

// text returns a single value, not empty.
func (v confNode) text() (string, error) {
	s, err := raw{n: v.n}.scalar()
	if err != nil {
		return "", v.errorf("%v", err)
	}
	return s, nil
}

// read reads v with a setting's reader; env resolves references.
func (v confNode) read(read func(raw) (value, error), env func(string) (string, bool)) (value, error) {
	val, err := read(raw{n: v.n, env: env})
	if err != nil {
		return value{}, v.errorf("%v", err)
	}
	val.at = origin{node: v}
	return val, nil
}

// envReference matches a value that is only a reference to an environment
// variable: ${NAME} or $NAME, or ${NAME:-DEFAULT}.
var envReference = regexp.MustCompile(`^\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))$`)

// secret returns the value of the environment variable r, a value of the
// file, refers to. A literal value is refused, so that no password is ever
// written in the file. ${NAME} and $NAME must be set and not empty;
// ${NAME:-DEFAULT} stands for DEFAULT when NAME is unset or empty:
// ${NAME:-} for a value that may be left out (secret returns ""). A
// DEFAULT other than empty must pass checkDefault; nil refuses every one.
func secret(r raw, example string, checkDefault func(string) error) (string, error) {
	s, err := r.scalar()
	if err != nil {
		return "", err
	}
	m := envReference.FindStringSubmatch(s)
	if m == nil {
		return "", fmt.Errorf("give a reference to an environment variable, such as ${%s}, not the value itself: secrets stay out of this file", example)
	}
	name, optional, def := m[1]+m[4], m[2] != "", m[3]
	if def != "" {
		if checkDefault == nil {
			return "", fmt.Errorf("a default is a value written in the file: use ${%s:-} for none", name)
		}
		if err := checkDefault(def); err != nil {
			return "", fmt.Errorf("the default of %s: %w", name, err)
		}
	}
	val, ok := r.env(name)
	switch {
	case val != "":
		return val, nil
	case optional:
		return def, nil
	case !ok:
		return "", fmt.Errorf("environment variable %s is not set (write ${%s:-} if it may be)", name, name)
	}
	return "", fmt.Errorf("environment variable %s is empty", name)
}

// dsnDefault refuses a default DSN that holds a password: it would sit in
// the file.
func dsnDefault(dsn string) error {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if _, has := u.User.Password(); !has && !u.Query().Has("password") {
			return nil
		}
	} else if !strings.Contains(dsn, "password=") {
		return nil
	}
	return errors.New("holds a password: give it in the environment, or in PGPASSWORD or ~/.pgpass")
}
