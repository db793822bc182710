package workload

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSanitizeLabelName(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"team", "team"},
		{"cost-center", "cost_center"},
		{"app.kubernetes.io/name", "app_kubernetes_io_name"},
		{"9lives", "_9lives"},
		{"__name__", "_name__"},
		{"___x", "_x"},
		{"_ok", "_ok"},
		{"ünïcode", "_n_code"},
		{"", ""},
		{"--", "_"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := SanitizeLabelName(tt.in); got != tt.want {
				t.Errorf("SanitizeLabelName(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func FuzzSanitizeLabelName(f *testing.F) {
	for _, s := range []string{"team", "__x", "9", "a.b/c", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := SanitizeLabelName(s)
		if s == "" {
			if got != "" {
				t.Fatalf("SanitizeLabelName(%q) = %q, want empty", s, got)
			}
			return
		}
		if !labelNameRE.MatchString(got) || strings.HasPrefix(got, "__") {
			t.Fatalf("SanitizeLabelName(%q) = %q, not a valid label name", s, got)
		}
	})
}

func TestCapValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"longer than ten", 10, "longer tha"},
		{"héllo", 2, "h"}, // é is two bytes: not cut in half
		{"héllo", 3, "hé"},
		{"a\xffb", 10, "a\uFFFDb"},
		{"日本語", 4, "日"},
		{"x", 0, ""},
		{"x", -1, ""},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q cut at %d", tt.in, tt.n), func(t *testing.T) {
			if got := CapValue(tt.in, tt.n); got != tt.want {
				t.Errorf("CapValue(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func FuzzCapValue(f *testing.F) {
	f.Add("héllo", 3)
	f.Add("\xff\xfe", 1)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := CapValue(s, n)
		if !utf8.ValidString(got) || len(got) > max(n, 0) {
			t.Fatalf("CapValue(%q, %d) = %q", s, n, got)
		}
	})
}

func TestCleanValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in string
		n        int
		want     string
	}{
		{"plain", "llama-3.1-8b", 128, "llama-3.1-8b"},
		{"ESC and BEL (a terminal title)", "\x1b]0;pwned\x07llama", 128, "]0;pwnedllama"},
		{"CSI clear screen", "a\x1b[2Jb", 128, "a[2Jb"},
		{"newline, tab, carriage return", "a\nb\tc\rd", 128, "abcd"},
		{"DEL", "a\x7fb", 128, "ab"},
		{"C1 CSI", "a\u009b31mb", 128, "a31mb"},
		{"bidi override and isolate", "abc\u202edef\u2066g\u2069", 128, "abcdefg"},
		{"line separator", "a\u2028b", 128, "ab"},
		{"invalid UTF-8", "a\xffb", 128, "a\uFFFDb"},
		{"other scripts kept", "模型-ü", 128, "模型-ü"},
		{"cut after cleaning", "\x1b\x1b\x1babcdef", 3, "abc"},
		{"cut at a boundary", "aé", 2, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := CleanValue(tt.in, tt.n); got != tt.want {
				t.Errorf("CleanValue(%q, %d) = %q, want %q", tt.in, tt.n, got, tt.want)
			}
		})
	}
}

func FuzzCleanValue(f *testing.F) {
	f.Add("\x1b]0;x\x07", 10)
	f.Add("\u202e\xff", 4)
	f.Fuzz(func(t *testing.T, s string, n int) {
		got := CleanValue(s, n)
		if !utf8.ValidString(got) || len(got) > max(n, 0) {
			t.Fatalf("CleanValue(%q, %d) = %q", s, n, got)
		}
		for _, r := range got {
			if unsafeRune(r) {
				t.Fatalf("CleanValue(%q, %d) = %q keeps %U", s, n, got, r)
			}
		}
	})
}

func TestParseExtraLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec    string
		want    map[string]string
		wantErr string
	}{
		{spec: "", want: map[string]string{}},
		{spec: "  ", want: map[string]string{}},
		{spec: "team=team,cost_center=billing/cost-center", want: map[string]string{"team": "team", "cost_center": "billing/cost-center"}},
		{spec: " team = team , project=example.com/project ", want: map[string]string{"team": "team", "project": "example.com/project"}},
		{spec: "team,billing/cost-center", want: map[string]string{"team": "team", "billing_cost_center": "billing/cost-center"}},
		{spec: "cost-center=team", wantErr: `extra label "cost-center=team": "cost-center" is not a Prometheus label name`},
		{spec: "__meta=team", wantErr: `extra label "__meta=team": label names starting with "__" are reserved`},
		{spec: "pod=team", wantErr: `extra label "pod=team": "pod" is a label gpuxray already sets`},
		{spec: "workload=team", wantErr: `"workload" is a label gpuxray already sets`},
		{spec: "team=", wantErr: `extra label "team=": the pod label key is empty`},
		{spec: "=team", wantErr: `extra label "=team": the label name is empty`},
		{spec: "team=team,,x=y", wantErr: `an empty item`},
		{spec: "team=team,", wantErr: `an empty item`},
		{spec: "team=team,team=squad", wantErr: `extra label "team=squad": label name "team" already carries pod label "team"`},
		{spec: "team=Bad_Prefix/x", wantErr: `"Bad_Prefix/x" is not a Kubernetes label key: the prefix must be a DNS subdomain`},
		{spec: "team=-team", wantErr: `"-team" is not a Kubernetes label key: the name must be`},
		{spec: "team=a/b/c", wantErr: `"a/b/c" is not a Kubernetes label key`},
		{spec: "team=" + strings.Repeat("t", 64), wantErr: `is not a Kubernetes label key`},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			t.Parallel()
			got, err := ParseExtraLabels(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseExtraLabels(%q) = %v, %v; want an error containing %q", tt.spec, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("ParseExtraLabels(%q) = %v, %v; want %v", tt.spec, got, err, tt.want)
			}
		})
	}
}

func TestExtraLabels(t *testing.T) {
	t.Parallel()
	extra := map[string]string{"team": "team", "cost_center": "billing/cost-center"}
	got := ExtraLabels(extra, map[string]string{"team": strings.Repeat("n", 300), "app": "x"})
	want := map[string]string{"team": strings.Repeat("n", MaxExtraLabelBytes), "cost_center": ""}
	if !maps.Equal(got, want) {
		t.Errorf("ExtraLabels = %v, want %v", got, want)
	}
	if got := ExtraLabels(nil, map[string]string{"team": "a"}); got != nil {
		t.Errorf("ExtraLabels with none configured = %v, want nil", got)
	}
}

func TestModelFromLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                string
		labels, annotations map[string]string
		keys                []string
		want                string
	}{
		{"none", nil, nil, DefaultModelKeys, ""},
		{"gpuxray label first", map[string]string{"model": "a", "gpuxray.io/model": "b"}, nil, DefaultModelKeys, "b"},
		{"production-stack model label", map[string]string{"model": "llama3", "app.kubernetes.io/name": "vllm"}, nil, DefaultModelKeys, "llama3"},
		{"llm-d", map[string]string{"llm-d.ai/model": "qwen", "llm-d.ai/role": "decode"}, nil, DefaultModelKeys, "qwen"},
		{"aibrix", map[string]string{"model.aibrix.ai/name": "deepseek-r1-distill-llama-8b"}, nil, DefaultModelKeys, "deepseek-r1-distill-llama-8b"},
		{"gke", map[string]string{"ai.gke.io/model": "gemma-2b-it", "ai.gke.io/inference-server": "vllm"}, nil, DefaultModelKeys, "gemma-2b-it"},
		{"app name as a last resort", map[string]string{"app.kubernetes.io/name": "whisper"}, nil, DefaultModelKeys, "whisper"},
		{"an annotation of an earlier key beats a label of a later one", map[string]string{"app.kubernetes.io/name": "vllm"}, map[string]string{"gpuxray.io/model": "Llama 3.1 8B"}, DefaultModelKeys, "Llama 3.1 8B"},
		{"a label beats the same key's annotation", map[string]string{"model": "l"}, map[string]string{"model": "a"}, DefaultModelKeys, "l"},
		{"blank values are passed over", map[string]string{"gpuxray.io/model": "  ", "model": "m"}, nil, DefaultModelKeys, "m"},
		{"custom keys", map[string]string{"model": "m", "acme.com/llm": "x"}, nil, []string{"acme.com/llm"}, "x"},
		{"capped", nil, map[string]string{"model": strings.Repeat("é", 100)}, DefaultModelKeys, strings.Repeat("é", MaxModelBytes/2)},
		{"invalid UTF-8 replaced", nil, map[string]string{"model": "a\xffb"}, DefaultModelKeys, "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ModelFromLabels(tt.labels, tt.annotations, tt.keys); got != tt.want {
				t.Errorf("ModelFromLabels = %q, want %q", got, tt.want)
			}
		})
	}
}
