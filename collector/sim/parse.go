package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

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
	d := &validator{file: name, byPath: map[string]*yaml.Node{}, byPos: map[nodePos]string{}}
	if err := d.index(doc.Content[0], "", reflect.TypeFor[ScenarioSpec]()); err != nil {
		return nil, nil, err
	}
	spec := &ScenarioSpec{}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true) // index refused unknown keys already: a second guard
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
}

// validator turns a decoded ScenarioSpec into a Scenario, naming each error
// by field path and by the line the document's index gives that path.
type validator struct {
	file string
	// byPath are the document's nodes by field path
	// ("pods[1].util[2].value"), byPos the paths of its value nodes.
	byPath map[string]*yaml.Node
	byPos  map[nodePos]string
}

// emptyAllowed are the fields whose values may be "": names and values
// that Kubernetes and the kubelet take as they are.
var emptyAllowed = regexp.MustCompile(`(^pods\[\d+\]\.labels\.|node_selector\.|^driver\.node_labels\[\d+\]\.value$|^faults\[\d+\]\.ids\[\d+\]$)`)

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// index walks the document under path, whose field has type t, checking
// its shape against t: lists where t wants one, mappings with t's keys,
// each given once (no merge keys), values given ("key:" with nothing is
// not one), and strings not "" where a string must say something. The
// leaf types check their own values when they are decoded.
func (d *validator) index(n *yaml.Node, path string, t reflect.Type) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return d.index(n.Alias, path, t)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pos := nodePos{n.Line, n.Column, n.Kind}
	if _, ok := d.byPos[pos]; !ok {
		d.byPos[pos] = path
	}
	if _, ok := d.byPath[path]; !ok {
		d.byPath[path] = n
	}
	info := infoOf(t)
	switch {
	case n.Tag == "!!null" && path != "":
		return d.errf(path, "want %s, got nothing", wantOf(t, path))
	case n.Kind == yaml.SequenceNode && info.elem != nil:
		for i, c := range n.Content {
			if err := d.index(c, path+"["+strconv.Itoa(i)+"]", info.elem); err != nil {
				return err
			}
		}
	case n.Kind == yaml.MappingNode && (t.Kind() == reflect.Map || len(info.keys) > 0):
		return d.mapping(n, path, t, info)
	case info.self:
		// A leaf, or a union of forms that says what it wants itself.
	case n.Kind != yaml.ScalarNode || t.Kind() == reflect.Slice || t.Kind() == reflect.Map || t.Kind() == reflect.Struct:
		return d.errf(path, "want %s, got %s", wantOf(t, path), kindName(n))
	case n.Value == "" && t.Kind() == reflect.String && !emptyAllowed.MatchString(path):
		return d.errf(path, "must not be empty")
	}
	return nil
}

// mapping checks the keys of mapping n, a field of type t at path, before
// it walks their values.
func (d *validator) mapping(n *yaml.Node, path string, t reflect.Type, info *typeInfo) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		p := join(path, k.Value)
		switch {
		case k.Value == "<<":
			return &ScenarioError{File: d.file, Line: k.Line, Field: path, Msg: "merge keys (<<) are not supported"}
		case t.Kind() == reflect.Struct && info.fields[k.Value] == nil:
			return &ScenarioError{File: d.file, Line: k.Line, Field: p, Msg: "unknown key; want one of " + strings.Join(info.keys, ", ")}
		case seen[k.Value]:
			return &ScenarioError{File: d.file, Line: k.Line, Field: p, Msg: "given twice"}
		}
		seen[k.Value] = true
		d.byPos[nodePos{k.Line, k.Column, k.Kind}] = p
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		vt := info.fields[n.Content[i].Value]
		if t.Kind() == reflect.Map {
			vt = t.Elem()
		}
		if err := d.index(n.Content[i+1], join(path, n.Content[i].Value), vt); err != nil {
			return err
		}
	}
	return nil
}

// typeInfo is what index needs of a spec type: whether it decodes itself,
// the type of its list items (a slice's, or the list form's of Steps,
// Levels and MIGSpec), and a struct's keys in field order with their types.
type typeInfo struct {
	self   bool
	elem   reflect.Type
	keys   []string
	fields map[string]reflect.Type
}

var typeInfos sync.Map // reflect.Type → *typeInfo

func infoOf(t reflect.Type) *typeInfo {
	if v, ok := typeInfos.Load(t); ok {
		return v.(*typeInfo)
	}
	info := &typeInfo{self: reflect.PointerTo(t).Implements(unmarshalerType), fields: map[string]reflect.Type{}}
	switch t.Kind() {
	case reflect.Slice:
		info.elem = t.Elem()
	case reflect.Struct:
		for f := range t.Fields() {
			switch k, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); {
			case k == "-" && f.Type.Kind() == reflect.Slice && info.elem == nil:
				info.elem = f.Type.Elem()
			case k != "" && k != "-":
				info.keys = append(info.keys, k)
				info.fields[k] = f.Type
			}
		}
	}
	typeInfos.Store(t, info)
	return info
}

// wantOf says what a field of type t at path wants.
func wantOf(t reflect.Type, path string) string {
	switch {
	case infoOf(t).elem != nil:
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

var lineRE = regexp.MustCompile(`^line (\d+): (.*)$`)

// decodeError turns what yaml.v3's decoder says into a ScenarioError: a
// leaf's own error names its field.
func (d *validator) decodeError(err error) error {
	var ve *valueError
	if errors.As(err, &ve) {
		path := d.byPos[nodePos{ve.line, ve.col, ve.kind}]
		if ve.sub != "" {
			path = join(path, ve.sub)
		}
		return &ScenarioError{File: d.file, Line: ve.line, Field: path, Msg: ve.msg}
	}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return &ScenarioError{File: d.file, Line: line, Msg: m[2]}
	}
	return &ScenarioError{File: d.file, Msg: msg}
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
