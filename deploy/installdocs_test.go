package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

const installDocs = "../docs/install.md"

// docBlock is a fenced code block of a Markdown file, dedented.
type docBlock struct {
	lang, text string
}

func docBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docBlock
	for _, m := range regexp.MustCompile("(?ms)^( *)```(\\w*)\n(.*?)^ *```").FindAllStringSubmatch(string(b), -1) {
		var lines []string
		for _, l := range strings.SplitAfter(m[3], "\n") {
			lines = append(lines, strings.TrimPrefix(l, m[1]))
		}
		out = append(out, docBlock{lang: m[2], text: strings.Join(lines, "")})
	}
	return out
}

// shellWords splits a command line as sh would for the quoting the docs
// use (double quotes), with $IMAGE and $TAG set.
func shellWords(line string, env map[string]string) []string {
	var words []string
	var w strings.Builder
	in, quoted := false, false
	for _, r := range line {
		switch {
		case r == '"':
			quoted, in = !quoted, true
		case (r == ' ' || r == '\t') && !quoted:
			if in {
				words = append(words, w.String())
				w.Reset()
				in = false
			}
		default:
			w.WriteRune(r)
			in = true
		}
	}
	if in {
		words = append(words, w.String())
	}
	for i := range words {
		for k, v := range env {
			words[i] = strings.ReplaceAll(words[i], "$"+k, v)
		}
	}
	return words
}

// TestInstallDocs renders what docs/install.md (and README's short version)
// tells a reader to install:
// each `helm install` of the chart with its flags (the image as built in
// its first steps), and each kustomization it shows, built beside this
// checkout as it says, then checks each rendering like the shipped ones,
// with the image the reader pushed and the labels, driver mounts, DRA flags
// and sizes the text promises.
func TestInstallDocs(t *testing.T) {
	t.Parallel()
	rule, dashboards := monitoringSources(t, ".")
	const image, tag = "registry.example.com/platform/gpuxray", "v0.1.0-12-gabcdef0"
	blocks := docBlocks(t, installDocs)

	// The image is built for both platforms and pushed, with the
	// Dockerfile's build arguments.
	build := ""
	for _, b := range blocks {
		if strings.Contains(b.text, "docker buildx build") {
			build = strings.ReplaceAll(b.text, "\\\n", " ")
		}
	}
	for _, want := range []string{"--platform linux/amd64,linux/arm64", `-t "$IMAGE:$TAG" --push .`, `--build-arg VERSION="$TAG"`, "--build-arg REVISION="} {
		if !strings.Contains(build, want) {
			t.Errorf("the docs' image build lacks %q:\n%s", want, build)
		}
	}

	// README's short install runs the same command.
	helmRuns := 0
	for _, b := range append(slices.Clone(blocks), docBlocks(t, "../README.md")...) {
		if b.lang != "sh" {
			continue
		}
		for _, line := range strings.Split(strings.ReplaceAll(b.text, "\\\n", " "), "\n") {
			if !strings.HasPrefix(line, "helm install gpuxray deploy/helm/gpuxray ") {
				continue
			}
			helmRuns++
			args := shellWords(strings.TrimPrefix(line, "helm install gpuxray deploy/helm/gpuxray "), map[string]string{"IMAGE": image, "TAG": tag})
			t.Run(fmt.Sprintf("helm install %d", helmRuns), func(t *testing.T) {
				t.Parallel()
				out, err := output(t, need(t, "helm"), append([]string{"template", "gpuxray", chart}, args...)...)
				if err != nil {
					t.Fatalf("helm template %v: %v", args, err)
				}
				m, err := decodeManifest(out)
				if err != nil {
					t.Fatal(err)
				}
				set := strings.Join(args, " ")
				checkManifest(t, m, expect{namespace: "gpuxray", serviceMonitor: true, rule: rule != "", dashboards: len(dashboards),
					release: "kube-prometheus-stack", gkeDriver: strings.Contains(set, "gkeDriver.enabled=true")})
				if c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]; c.Image != image+":"+tag {
					t.Errorf("image %s, want the one built, %s:%s", c.Image, image, tag)
				}
			})
		}
	}
	if helmRuns < 3 {
		t.Errorf("%d helm installs in docs/install.md and README, want kube-prometheus-stack's, GKE's and README's", helmRuns)
	}

	// Each kustomization, by the folder its first line names.
	wants := map[string]expect{
		"my-gpuxray":         {serviceMonitor: true, release: "kube-prometheus-stack"},
		"my-gpuxray-release": {serviceMonitor: true, release: "prometheus"},
		"my-gpuxray-gke":     {serviceMonitor: true, release: "kube-prometheus-stack", gkeDriver: true},
		"my-gpuxray-dra":     {serviceMonitor: true, release: "kube-prometheus-stack", hostPID: true},
		"my-gpuxray-large":   {serviceMonitor: true},
	}
	root := t.TempDir()
	seen := 0
	for _, b := range blocks {
		m := regexp.MustCompile(`^# (\S+)/kustomization\.yaml\n`).FindStringSubmatch(b.text)
		if b.lang != "yaml" || m == nil {
			continue
		}
		seen++
		name := m[1]
		want, ok := wants[name]
		if !ok {
			t.Errorf("docs/install.md shows %s/kustomization.yaml, which this test does not check", name)
			continue
		}
		dir := filepath.Join(root, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The docs' folder sits beside the checkout, named gpuxray.
		abs, _ := filepath.Abs("..")
		rel, _ := filepath.Rel(dir, abs)
		text := strings.ReplaceAll(b.text, "../gpuxray/", rel+"/")
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		var k struct {
			Images []struct{ NewName, NewTag string }
		}
		if err := yaml.Unmarshal([]byte(b.text), &k); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		t.Run("kustomize "+name, func(t *testing.T) {
			t.Parallel()
			mf := kustomizeBuild(t, dir)
			want.namespace, want.rule, want.dashboards = "gpuxray", rule != "", len(dashboards)
			checkManifest(t, mf, want)
			c := one[appsv1.DaemonSet](t, mf).Spec.Template.Spec.Containers[0]
			wantImage := "ghcr.io/gpuxray/gpuxray:" + chartAppVersion(t, chart)
			if len(k.Images) == 1 {
				wantImage = k.Images[0].NewName + ":" + k.Images[0].NewTag
			}
			if c.Image != wantImage {
				t.Errorf("image %s, want %s", c.Image, wantImage)
			}
			switch name {
			case "my-gpuxray-dra":
				for _, f := range []string{"--dra.drivers=gpu.nvidia.com", "--dra.uuid-attribute=uuid"} {
					if !slices.Contains(c.Args, f) {
						t.Errorf("args %q lack %s", c.Args, f)
					}
				}
			case "my-gpuxray-large":
				if l := c.Resources.Limits.Memory().String(); l != "256Mi" || envValue(c.Env, "GOMEMLIMIT") != "192MiB" {
					t.Errorf("limit %s, GOMEMLIMIT %q: want 256Mi and 192MiB", l, envValue(c.Env, "GOMEMLIMIT"))
				}
			}
		})
	}
	if seen != len(wants) {
		t.Errorf("%d kustomizations in docs/install.md, want %d", seen, len(wants))
	}
}
