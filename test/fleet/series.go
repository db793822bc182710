package fleet

import (
	"bufio"
	"bytes"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strconv"
	"strings"
)

// series is one time series of an exposition with timestamps.
type series struct {
	name   string
	labels []label // sorted by name, without __name__
	ts     []int64 // milliseconds
	vals   []float64
}

type label struct{ name, value string }

// readOM reads an OpenMetrics exposition with timestamps, as
// `gpuxray replay --format openmetrics` writes it (each series' samples
// together, in time order), and calls each once per series. Comment lines
// go to comment, when set, as they come.
func readOM(r io.Reader, each func(*series) error, comment func(line []byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var cur *series
	var curKey []byte
	flush := func() error {
		if cur == nil {
			return nil
		}
		s := cur
		cur = nil
		return each(s)
	}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		if b[0] == '#' {
			if err := flush(); err != nil {
				return err
			}
			if comment != nil {
				if err := comment(b); err != nil {
					return err
				}
			}
			continue
		}
		// name{labels} value timestamp
		j := bytes.LastIndexByte(b, ' ')
		if j < 0 {
			return fmt.Errorf("line %d: no timestamp: %.200s", line, b)
		}
		i := bytes.LastIndexByte(b[:j], ' ')
		if i < 0 {
			return fmt.Errorf("line %d: no value: %.200s", line, b)
		}
		v, err := strconv.ParseFloat(string(b[i+1:j]), 64)
		if err != nil {
			return fmt.Errorf("line %d: value: %w", line, err)
		}
		ts, err := parseTimestamp(b[j+1:])
		if err != nil {
			return fmt.Errorf("line %d: timestamp: %w", line, err)
		}
		key := b[:i]
		if cur == nil || !bytes.Equal(key, curKey) {
			if err := flush(); err != nil {
				return err
			}
			name, labels, err := parseSeries(string(key))
			if err != nil {
				return fmt.Errorf("line %d: %w", line, err)
			}
			cur = &series{name: name, labels: labels}
			curKey = append(curKey[:0], key...)
		}
		cur.ts = append(cur.ts, ts)
		cur.vals = append(cur.vals, v)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return flush()
}

// parseTimestamp reads seconds with up to three decimals as milliseconds.
func parseTimestamp(b []byte) (int64, error) {
	s := string(b)
	whole, frac, _ := strings.Cut(s, ".")
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return 0, err
	}
	frac = (frac + "000")[:3]
	ms, err := strconv.ParseInt(frac, 10, 64)
	if err != nil {
		return 0, err
	}
	return sec*1000 + ms, nil
}

// parseSeries reads name{a="x",b="y"}.
func parseSeries(s string) (string, []label, error) {
	i := strings.IndexByte(s, '{')
	if i < 0 {
		return s, nil, nil
	}
	name, rest := s[:i], s[i+1:]
	var out []label
	for {
		rest = strings.TrimLeft(rest, ", ")
		if strings.HasPrefix(rest, "}") {
			break
		}
		eq := strings.Index(rest, `="`)
		if eq < 0 {
			return "", nil, fmt.Errorf("series %.200s: bad label", s)
		}
		ln := rest[:eq]
		rest = rest[eq+2:]
		var v strings.Builder
		k := 0
		for ; k < len(rest) && rest[k] != '"'; k++ {
			if rest[k] == '\\' && k+1 < len(rest) {
				k++
				switch rest[k] {
				case 'n':
					v.WriteByte('\n')
				default:
					v.WriteByte(rest[k])
				}
				continue
			}
			v.WriteByte(rest[k])
		}
		if k >= len(rest) {
			return "", nil, fmt.Errorf("series %.200s: unterminated label value", s)
		}
		out = append(out, label{ln, v.String()})
		rest = rest[k+1:]
	}
	sort.Slice(out, func(a, b int) bool { return out[a].name < out[b].name })
	return name, out, nil
}

// appendOMLines appends s's samples as OpenMetrics sample lines.
func appendOMLines(buf []byte, s *series) []byte {
	var key strings.Builder
	key.WriteString(s.name)
	key.WriteByte('{')
	for i, l := range s.labels {
		if i > 0 {
			key.WriteByte(',')
		}
		key.WriteString(l.name)
		key.WriteString(`="`)
		key.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(l.value))
		key.WriteByte('"')
	}
	key.WriteByte('}')
	k := key.String()
	for i, t := range s.ts {
		buf = append(buf, k...)
		buf = append(buf, ' ')
		buf = strconv.AppendFloat(buf, s.vals[i], 'g', -1, 64)
		buf = fmt.Appendf(buf, " %d.%03d\n", t/1000, t%1000)
	}
	return buf
}

// identity renames one node's series as another node's: its name, in the
// instance and node labels and in every name that holds it (pods,
// node-specific workloads), and its GPUs' UUIDs, so that a copy of a
// node's history is a node of its own.
type identity struct {
	from, to string
	// shiftMS moves every timestamp, as scrapers that are not in step do.
	shiftMS int64
}

func (id identity) apply(s *series) *series {
	if id.from == id.to && id.shiftMS == 0 {
		return s
	}
	out := &series{name: s.name, labels: make([]label, len(s.labels)), ts: s.ts, vals: s.vals}
	for i, l := range s.labels {
		v := l.value
		switch l.name {
		case "uuid", "parent_uuid":
			v = id.uuid(v)
		default:
			v = strings.ReplaceAll(v, id.from, id.to)
		}
		out.labels[i] = label{l.name, v}
	}
	if id.shiftMS != 0 {
		out.ts = make([]int64, len(s.ts))
		for i, t := range s.ts {
			out.ts[i] = t + id.shiftMS
		}
	}
	return out
}

// uuid gives a copied GPU a UUID of its own: the last twelve hex digits
// are a hash of the original and the new node.
func (id identity) uuid(u string) string {
	if u == "" || id.from == id.to || len(u) < 12 {
		return u
	}
	h := fnv.New64a()
	h.Write([]byte(u + "/" + id.to))
	return u[:len(u)-12] + fmt.Sprintf("%012x", h.Sum64()&0xffffffffffff)
}
