package workload

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxExtraLabelBytes caps the value of an extra label copied from a pod
// label (Kubernetes allows 63 bytes; the cap also bounds any other source).
const MaxExtraLabelBytes = 128

// ReservedLabelNames are the labels gpuxray's own series carry; an extra
// label may not take one of these names (a duplicate label name cannot be
// exported), nor any name starting with "__" (reserved by Prometheus).
var ReservedLabelNames = []string{
	"attribution", "container", "driver_version", "gpu", "instance", "job", "mig_profile", "model",
	"name", "namespace", "parent_uuid", "pod", "reason", "resource", "shared",
	"source", "stale", "utilization_source", "uuid", "window", "workload", "workload_kind",
}

// SanitizeLabelName turns s into a valid Prometheus label name
// ([a-zA-Z_][a-zA-Z0-9_]*): every other character becomes "_", a leading
// digit gets a "_" before it, and a leading run of underscores is cut to one,
// since names starting with "__" are reserved. It returns "" for "".
func SanitizeLabelName(s string) string {
	if s == "" {
		return ""
	}
	b := make([]byte, 0, len(s)+1)
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
			b = append(b, byte(r))
		case r >= '0' && r <= '9':
			if i == 0 {
				b = append(b, '_')
			}
			b = append(b, byte(r))
		default:
			b = append(b, '_')
		}
	}
	out := string(b)
	if strings.HasPrefix(out, "__") {
		out = "_" + strings.TrimLeft(out, "_")
	}
	return out
}

// CapValue returns s as valid UTF-8 (each invalid byte sequence replaced by
// U+FFFD) of at most n bytes, cut at a character boundary. n ≤ 0 gives "".
func CapValue(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// MaxNameBytes caps a name copied from a pod into a label value (a
// workload's name, a queue's): Kubernetes names are at most 253 bytes.
const MaxNameBytes = 253

// CleanValue returns s as a label value that a terminal, a log or a
// report can print as is: valid UTF-8 (each invalid sequence replaced by
// U+FFFD), without control characters (C0, DEL, C1: ESC and BEL retitle,
// clear or fake a terminal's lines), the bidirectional formatting
// characters that reorder what a reader sees (U+061C, U+200E, U+200F,
// U+202A–U+202E, U+2066–U+2069) or the line and paragraph separators
// (U+2028, U+2029), cut at a character boundary to at most n bytes.
// Whoever can label or annotate a pod chooses these values.
func CleanValue(s string, n int) string {
	if n <= 0 {
		return ""
	}
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return CapValue(s, n)
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	var b strings.Builder
	b.Grow(min(len(s), n))
	for _, r := range s {
		if !unsafeRune(r) {
			b.WriteRune(r)
		}
	}
	return CapValue(b.String(), n)
}

// unsafeRune reports whether CleanValue drops r.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r >= 0x7f && r < 0xa0: // C0, DEL, C1
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069,
		r == 0x2028, r == 0x2029:
		return true
	}
	return false
}

var (
	labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	// A Kubernetes label key: an optional DNS-subdomain prefix and "/", then
	// a name of at most 63 characters, alphanumeric at both ends.
	keyNameRE   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)
	keyPrefixRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// ParseExtraLabels parses a list of extra labels, "name=key,name=key", each
// mapping a Prometheus label name to the pod label key whose value it
// carries, e.g. "team=team,cost_center=billing/cost-center". An item that is
// only a key ("billing/cost-center") takes its name from SanitizeLabelName
// ("billing_cost_center"). Spaces around items are ignored; an empty spec
// gives an empty map. The error names the bad item and what is wrong with it.
func ParseExtraLabels(spec string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(spec) == "" {
		return out, nil
	}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("extra labels %q: an empty item (two commas, or one at an end)", spec)
		}
		name, key, ok := strings.Cut(item, "=")
		name, key = strings.TrimSpace(name), strings.TrimSpace(key)
		if !ok {
			key, name = name, SanitizeLabelName(name)
		}
		if err := validKey(key); err != nil {
			return nil, fmt.Errorf("extra label %q: %w", item, err)
		}
		if err := validName(name); err != nil {
			return nil, fmt.Errorf("extra label %q: %w", item, err)
		}
		if prev, dup := out[name]; dup {
			return nil, fmt.Errorf("extra label %q: label name %q already carries pod label %q", item, name, prev)
		}
		out[name] = key
	}
	return out, nil
}

func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("the label name is empty")
	case !labelNameRE.MatchString(name):
		return fmt.Errorf("%q is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*)", name)
	case strings.HasPrefix(name, "__"):
		return fmt.Errorf("label names starting with \"__\" are reserved by Prometheus")
	}
	if slices.Contains(ReservedLabelNames, name) {
		return fmt.Errorf("%q is a label gpuxray already sets", name)
	}
	return nil
}

func validKey(key string) error {
	if key == "" {
		return fmt.Errorf("the pod label key is empty")
	}
	prefix, name, hasPrefix := strings.Cut(key, "/")
	if !hasPrefix {
		prefix, name = "", key
	}
	if hasPrefix && (prefix == "" || len(prefix) > 253 || !keyPrefixRE.MatchString(prefix)) {
		return fmt.Errorf("%q is not a Kubernetes label key: the prefix must be a DNS subdomain", key)
	}
	if !keyNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a Kubernetes label key: the name must be 1 to 63 letters, digits, '-', '_' or '.', alphanumeric at both ends", key)
	}
	return nil
}

// ExtraLabels returns the extra labels of a pod with the given labels: for
// each name of extra (as ParseExtraLabels returns it), the value of its pod
// label cleaned and capped at MaxExtraLabelBytes (CleanValue), or "" when the pod lacks the label,
// so that every pod's series carry the same label names.
func ExtraLabels(extra map[string]string, labels map[string]string) map[string]string {
	if len(extra) == 0 {
		return nil
	}
	out := make(map[string]string, len(extra))
	for name, key := range extra {
		out[name] = CleanValue(labels[key], MaxExtraLabelBytes)
	}
	return out
}
