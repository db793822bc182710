package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// ParseScenario parses and validates a scenario; name is the file name used
// in errors. Every error is a *ScenarioError.
func ParseScenario(data []byte, name string) (*Scenario, error) {
	spec, d, err := parseSpec(data, name)
	if err != nil {
		return nil, err
	}
	s, err := d.build(spec)
	if err != nil {
		return nil, err
	}
	s.Name = name
	return s, nil
}

// ParseScenarioSpec parses a scenario file as written, without validating
// it; ParseScenario is what a reader of scenarios wants.
func ParseScenarioSpec(data []byte, name string) (*ScenarioSpec, error) {
	spec, _, err := parseSpec(data, name)
	return spec, err
}

// yamlLine finds the line in yaml.v3's own syntax errors ("yaml: line 3: …").
var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseSpec checks the document (one, bounded aliases, no merge keys, no
// empty values), indexes its nodes by field path, and decodes it.
func parseSpec(data []byte, name string) (*ScenarioSpec, *validator, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		msg := err.Error()
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			line, _ := strconv.Atoi(m[1])
			return nil, nil, &ScenarioError{File: name, Line: line, Msg: m[2]}
		}
		return nil, nil, &ScenarioError{File: name, Msg: strings.TrimPrefix(msg, "yaml: ")}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil, nil, &ScenarioError{File: name, Msg: "empty scenario"}
	}
	var next yaml.Node
	if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
		line := next.Line
		if err != nil {
			line = 0 // a syntax error in what follows: still a second document
		}
		return nil, nil, &ScenarioError{File: name, Line: line, Msg: "a second YAML document (after ---): a scenario is one document"}
	}
	literal, expanded := nodeCounts(&doc)
	if expanded-literal > MaxAliasNodes {
		return nil, nil, &ScenarioError{File: name, Msg: fmt.Sprintf("its aliases expand to more than %d YAML nodes beyond the file's %d; write the values out", MaxAliasNodes, literal)}
	}
	d := &validator{file: name, byPath: map[string]*yaml.Node{}, byPos: map[nodePos]string{}, lines: map[int][]*yaml.Node{}}
	if err := d.index(doc.Content[0], "", false); err != nil {
		return nil, nil, err
	}
	spec := &ScenarioSpec{}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(spec); err != nil {
		return nil, nil, d.decodeError(err)
	}
	return spec, d, nil
}

// nodePos tells the nodes of a document apart: a mapping and its first key
// start at the same place.
type nodePos struct {
	line, col int
	kind      yaml.Kind
	key       bool
}

func posOf(n *yaml.Node, key bool) nodePos {
	return nodePos{line: n.Line, col: n.Column, kind: n.Kind, key: key}
}

// validator turns a decoded ScenarioSpec into a Scenario, naming each error
// by field path and by the line the document's index gives that path.
type validator struct {
	file string
	// byPath are the document's value nodes by field path
	// ("pods[1].util[2].value"), byPos the paths of its value and key
	// nodes, lines its nodes by line, in document order.
	byPath map[string]*yaml.Node
	byPos  map[nodePos]string
	lines  map[int][]*yaml.Node
	keys   map[*yaml.Node]bool
}

// emptyAllowed are the fields whose values may be "": names and values
// that Kubernetes and the kubelet take as they are.
var emptyAllowed = regexp.MustCompile(`(^pods\[\d+\]\.labels\.|node_selector\.|^driver\.node_labels\[\d+\]\.value$|^faults\[\d+\]\.ids\[\d+\]$)`)

// index walks the document under path, refusing merge keys, keys given
// twice, values left out (key: with nothing) and "" where a string must
// say something (the leaf types refuse "" themselves).
func (d *validator) index(n *yaml.Node, path string, key bool) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return d.index(n.Alias, path, key)
	}
	if _, ok := d.byPos[posOf(n, key)]; !ok {
		d.byPos[posOf(n, key)] = path
		d.lines[n.Line] = append(d.lines[n.Line], n)
		if key {
			if d.keys == nil {
				d.keys = map[*yaml.Node]bool{}
			}
			d.keys[n] = true
		}
	}
	if key {
		return nil
	}
	if _, ok := d.byPath[path]; !ok {
		d.byPath[path] = n
	}
	switch n.Kind {
	case yaml.ScalarNode:
		switch {
		case n.Tag == "!!null" && path != "":
			return d.errf(path, "want %s, got nothing", wantOf(typeAt(path), path))
		case n.Value == "" && n.Tag == "!!str" && !emptyAllowed.MatchString(path) && typeAt(path) == reflect.TypeFor[string]():
			return d.errf(path, "must not be empty")
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			if err := d.index(c, fmt.Sprintf("%s[%d]", path, i), false); err != nil {
				return err
			}
		}
	case yaml.MappingNode:
		seen := map[string]bool{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			p := join(path, k.Value)
			if err := d.index(k, p, true); err != nil {
				return err
			}
			switch {
			case k.Value == "<<":
				return &ScenarioError{File: d.file, Line: k.Line, Field: path, Msg: "merge keys (<<) are not supported"}
			case seen[k.Value]:
				return &ScenarioError{File: d.file, Line: k.Line, Field: p, Msg: "given twice"}
			}
			seen[k.Value] = true
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if err := d.index(n.Content[i+1], join(path, n.Content[i].Value), false); err != nil {
				return err
			}
		}
	}
	return nil
}

// has reports whether the file gives path.
func (d *validator) has(path string) bool {
	_, ok := d.byPath[path]
	return ok
}

// line is the line of path, or of the nearest field above it that the file
// gives (a missing key's mapping).
func (d *validator) line(path string) int {
	for {
		if n, ok := d.byPath[path]; ok {
			return n.Line
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			if n, ok := d.byPath[""]; ok {
				return n.Line
			}
			return 0
		}
		path = path[:i]
	}
}

// errf is an error of field, on its line.
func (d *validator) errf(field, format string, args ...any) error {
	return d.errAt(field, field, format, args...)
}

// errAt is an error of field on the line of at, another field that
// shows the problem.
func (d *validator) errAt(at, field, format string, args ...any) error {
	return &ScenarioError{File: d.file, Line: d.line(at), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// first returns the first of paths that the file gives, else the last.
func (d *validator) first(paths ...string) string {
	for _, p := range paths {
		if d.has(p) {
			return p
		}
	}
	return paths[len(paths)-1]
}

var (
	unknownKeyRE = regexp.MustCompile(`^line (\d+): field (.+) not found in type (\S+)$`)
	typeRE       = regexp.MustCompile("^line (\\d+): cannot unmarshal (!!\\w+)(?: `(.*)`)? into (.+)$")
)

// decodeError turns what yaml.v3's decoder says into a ScenarioError that
// names the field.
func (d *validator) decodeError(err error) error {
	var ve *valueError
	if errors.As(err, &ve) {
		path := d.byPos[nodePos{line: ve.line, col: ve.col, kind: ve.kind, key: ve.key}]
		if ve.sub != "" {
			path = join(path, ve.sub)
		}
		return &ScenarioError{File: d.file, Line: ve.line, Field: path, Msg: ve.msg}
	}
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return &ScenarioError{File: d.file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	msg := te.Errors[0]
	if m := unknownKeyRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ScenarioError{File: d.file, Line: line, Field: d.keyPath(line, m[2]),
			Msg: "unknown key; want one of " + strings.Join(keyNames(specTypes[m[3]]), ", ")}
	}
	if m := typeRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		path, n := d.valueAt(line, m[2], m[3], m[4])
		if n == nil {
			return &ScenarioError{File: d.file, Line: line, Msg: fmt.Sprintf("a %s value where a %s is wanted", m[2], m[4])}
		}
		got := kindName(n)
		return &ScenarioError{File: d.file, Line: line, Field: path, Msg: fmt.Sprintf("want %s, got %s", wantOf(typeAt(path), path), got)}
	}
	line := 0
	if m := regexp.MustCompile(`^line (\d+): (.*)$`).FindStringSubmatch(msg); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	return &ScenarioError{File: d.file, Line: line, Msg: msg}
}

// keyPath is the path of the key spelled key on line.
func (d *validator) keyPath(line int, key string) string {
	for _, n := range d.lines[line] {
		if d.keys[n] && n.Value == key {
			return d.byPos[posOf(n, true)]
		}
	}
	return key
}

// wantOf says what a field of type t at path wants.
func wantOf(t reflect.Type, path string) string {
	switch {
	case t == nil:
		return "a value"
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Struct && t.NumField() > 0 && t.Field(0).Name == "List":
		return "a list"
	case t.Kind() == reflect.Map:
		return "a mapping " + mapDesc[path[strings.LastIndex(path, ".")+1:]]
	case t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType):
		if path == "" {
			return "a mapping for the scenario"
		}
		return "a mapping for " + path
	}
	return "a value"
}

// mapDesc says what the mappings of names to values hold, by key.
var mapDesc = map[string]string{
	"mig":               `of GPUs to MIG layouts, such as {"gpu:0": [3g.40gb, 2g.20gb]}`,
	"numa_nodes":        `of GPUs to NUMA nodes, such as {"gpu:0": [0, 1]}`,
	"compute_instances": `of MIG devices to compute instance counts, such as {"mig:0/0": 3}`,
	"priority_classes":  "of class names to values",
	"labels":            "of names to values",
	"node_selector":     "of names to values",
}

// valueAt finds the value node on line that yaml.v3's type error shows:
// its tag, its value (cut to 7 characters and "..." when long) and the
// type its field has.
func (d *validator) valueAt(line int, tag, value, into string) (string, *yaml.Node) {
	for _, n := range d.lines[line] {
		if d.keys[n] || n.ShortTag() != tag {
			continue
		}
		path := d.byPos[posOf(n, false)]
		if t := typeAt(path); t == nil || t.String() != into {
			continue
		}
		if v, cut := strings.CutSuffix(value, "..."); (cut && strings.HasPrefix(n.Value, v)) || n.Value == value || value == "" {
			return path, n
		}
	}
	return "", nil
}

var pathPart = regexp.MustCompile(`\[\d+\]|[^.\[]+`)

// typeAt is the Go type of the field at path in a ScenarioSpec, nil for
// none.
func typeAt(path string) reflect.Type {
	t := reflect.TypeFor[ScenarioSpec]()
	parts := pathPart.FindAllString(path, -1)
	for i := 0; i < len(parts); i++ {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		part := parts[i]
		switch {
		case strings.HasPrefix(part, "[") && t.Kind() == reflect.Struct:
			// Steps, Levels and MIGSpec: a list, or a form of their own.
			f, ok := t.FieldByName("List")
			if !ok {
				f, ok = t.FieldByName("Profiles")
			}
			if !ok {
				return nil
			}
			t = f.Type.Elem()
		case strings.HasPrefix(part, "[") && t.Kind() == reflect.Slice:
			t = t.Elem()
		case t.Kind() == reflect.Map:
			// A key may have dots of its own (kueue.x-k8s.io/queue-name).
			for i+1 < len(parts) && !strings.HasPrefix(parts[i+1], "[") {
				i++
			}
			t = t.Elem()
		case t.Kind() == reflect.Struct:
			if t = fieldByKey(t, part); t == nil {
				return nil
			}
		default:
			return nil
		}
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// specTypes are the mapping types of a scenario file by the name yaml.v3's
// errors give them.
var specTypes = func() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for _, v := range []any{ScenarioSpec{}, PodSpec{}, StepSpec{}, DutySpec{}, UnallocatedSpec{}, UnattributedSpec{},
		EngineSpec{}, FaultSpec{}, UnscheduledSpec{}, ClusterQueueSpec{}, KubeletFileSpec{}, DriverSpec{},
		ZombieSpec{}, MIGModeSpec{}, ReloadSpec{}, NodeLabelSpec{}, Owner{}, LevelStep[Ratio]{}, LevelStep[Level]{}} {
		t := reflect.TypeOf(v)
		out[t.String()] = t
	}
	return out
}()

// keyNames are the keys of struct type t, in field order.
func keyNames(t reflect.Type) []string {
	if t == nil || t.Kind() != reflect.Struct {
		return nil
	}
	var out []string
	for f := range t.Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k != "" && k != "-" {
			out = append(out, k)
		}
	}
	return out
}

func reflectType(v any) reflect.Type { return reflect.TypeOf(v) }

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// knownKeys refuses keys of mappings under n that type t has no field for,
// down to the types that decode themselves.
func knownKeys(n *yaml.Node, t reflect.Type) error {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) && n.Kind != yaml.DocumentNode {
		return nil
	}
	switch {
	case t.Kind() == reflect.Slice && n.Kind == yaml.SequenceNode:
		for _, c := range n.Content {
			if err := knownKeys(c, t.Elem()); err != nil {
				return err
			}
		}
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		keys := keyNames(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			j := slices.Index(keys, k.Value)
			if j < 0 {
				return &valueError{line: k.Line, col: k.Column, kind: k.Kind, key: true, msg: "unknown key; want one of " + strings.Join(keys, ", ")}
			}
			if err := knownKeys(n.Content[i+1], fieldByKey(t, k.Value)); err != nil {
				return err
			}
		}
	}
	return nil
}

func fieldByKey(t reflect.Type, key string) reflect.Type {
	for f := range t.Fields() {
		if k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); k == key {
			return f.Type
		}
	}
	return nil
}

// nodeCounts returns the YAML nodes of n as written, and as the decoder
// walks them with each alias expanded, counted without expanding (each
// node's expanded size is computed once): so that a file of nested
// aliases is refused before it is walked. A count that passes the bound
// stops growing.
func nodeCounts(n *yaml.Node) (literal, expanded int64) {
	const stop = math.MaxInt64 / 4
	memo := map[*yaml.Node]int64{}
	var size func(n *yaml.Node, depth int) int64
	size = func(n *yaml.Node, depth int) int64 {
		if n == nil {
			return 0
		}
		if v, ok := memo[n]; ok {
			return v
		}
		if depth > 10_000 {
			return stop // a cycle, or nesting no scenario has
		}
		memo[n] = stop // while in progress: a cycle counts as unbounded
		var total int64 = 1
		if n.Kind == yaml.AliasNode {
			total = size(n.Alias, depth+1)
		} else {
			for _, c := range n.Content {
				total += size(c, depth+1)
				if total >= stop {
					total = stop
					break
				}
			}
		}
		memo[n] = total
		return total
	}
	var count func(n *yaml.Node)
	count = func(n *yaml.Node) {
		literal++
		for _, c := range n.Content {
			count(c)
		}
	}
	count(n)
	return literal, size(n, 0)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	default:
		return "something else"
	}
}
