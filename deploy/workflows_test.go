package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// workflow is the part of a GitHub Actions workflow the tests read.
type workflow struct {
	On struct {
		Push *struct {
			Tags     []string `yaml:"tags"`
			Branches []string `yaml:"branches"`
		} `yaml:"push"`
	} `yaml:"on"`
	// events are on's keys, those with no settings (pull_request:) too.
	events []string
	Jobs   map[string]struct {
		Needs       any               `yaml:"needs"`
		Permissions map[string]string `yaml:"permissions"`
		Container   string            `yaml:"container"`
		Steps       []workflowStep    `yaml:"steps"`
	} `yaml:"jobs"`
}

type workflowStep struct {
	ID   string            `yaml:"id"`
	Uses string            `yaml:"uses"`
	Run  string            `yaml:"run"`
	With map[string]any    `yaml:"with"`
	Env  map[string]string `yaml:"env"`
}

func readWorkflow(t *testing.T, name string) *workflow {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../.github/workflows", name))
	if err != nil {
		t.Fatal(err)
	}
	// YAML 1.2, as GitHub reads it: in YAML 1.1 (sigs.k8s.io/yaml) "on" is true.
	var w workflow
	if err := yaml.Unmarshal(b, &w); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var on struct {
		On map[string]any `yaml:"on"`
	}
	if err := yaml.Unmarshal(b, &on); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	for e := range on.On {
		w.events = append(w.events, e)
	}
	slices.Sort(w.events)
	return &w
}

// steps returns every step of every job of w, with its job's name.
func (w *workflow) steps() map[string][]workflowStep {
	out := map[string][]workflowStep{}
	for name, j := range w.Jobs {
		out[name] = j.Steps
	}
	return out
}

// TestWorkflowsLint runs actionlint (the workflow syntax, expressions, action
// inputs, and shellcheck on run: scripts where shellcheck is installed) on
// every workflow.
func TestWorkflowsLint(t *testing.T) {
	t.Parallel()
	actionlint := need(t, "actionlint") // go install github.com/rhysd/actionlint/cmd/actionlint (.ci/run pins it)
	files, err := filepath.Glob("../.github/workflows/*.yml")
	if err != nil || len(files) < 2 {
		t.Fatalf("workflows %v, %v: want the CI and the release workflows", files, err)
	}
	cmd := exec.Command(actionlint, append([]string{"-no-color"}, files...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("actionlint: %v\n%s", err, out)
	}
}

// TestReleaseWorkflow: a tag v* builds the image for amd64 and arm64 from the
// Dockerfile and pushes it to ghcr.io, and packages the chart with the tag's
// version and pushes it to an OCI registry, once the tag's version step has
// passed. The version step itself runs here on the checkout's manifests.
func TestReleaseWorkflow(t *testing.T) {
	t.Parallel()
	w := readWorkflow(t, "release.yml")
	if !slices.Equal(w.events, []string{"push"}) || !slices.Equal(w.On.Push.Tags, []string{"v*"}) || len(w.On.Push.Branches) > 0 {
		t.Errorf("release.yml runs on %v %+v, want pushed tags v* only", w.events, w.On.Push)
	}
	var build, login *workflowStep
	var helmRun string
	for job, steps := range w.steps() {
		for i, s := range steps {
			switch {
			case strings.HasPrefix(s.Uses, "docker/build-push-action@"):
				build = &steps[i]
				if w.Jobs[job].Permissions["packages"] != "write" {
					t.Errorf("job %s pushes the image without packages: write", job)
				}
			case strings.HasPrefix(s.Uses, "docker/login-action@"):
				login = &steps[i]
			case strings.Contains(s.Run, "helm push"):
				helmRun = s.Run
				if w.Jobs[job].Permissions["packages"] != "write" {
					t.Errorf("job %s pushes the chart without packages: write", job)
				}
				if !slices.Contains(needsOf(w.Jobs[job].Needs), "image") {
					t.Errorf("job %s pushes the chart before the image it names is pushed (needs %v)", job, w.Jobs[job].Needs)
				}
			}
		}
	}
	if build == nil {
		t.Fatal("no docker/build-push-action step")
	}
	platforms := strings.Split(strings.ReplaceAll(str(build.With["platforms"]), " ", ""), ",")
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) || build.With["push"] != true ||
		build.With["context"] != "." || build.With["file"] != "Dockerfile" {
		t.Errorf("image build %+v: want the Dockerfile for linux/amd64 and linux/arm64, pushed", build.With)
	}
	for _, arg := range []string{"VERSION=${{ github.ref_name }}", "REVISION=${{ github.sha }}"} {
		if !strings.Contains(str(build.With["build-args"]), arg) {
			t.Errorf("image build-args %q lack %s", build.With["build-args"], arg)
		}
	}
	if login == nil || login.With["registry"] != "ghcr.io" {
		t.Errorf("no login to ghcr.io: %+v", login)
	}
	for _, want := range []string{
		`helm package deploy/helm/gpuxray --version "$VERSION" --app-version "$VERSION"`,
		`helm push "dist/gpuxray-$VERSION.tgz" "oci://ghcr.io/`,
	} {
		if !strings.Contains(helmRun, want) {
			t.Errorf("the chart step lacks %q:\n%s", want, helmRun)
		}
	}

	// The version step, run as the release would run it, on this checkout.
	var version *workflowStep
	for _, s := range w.Jobs["version"].Steps {
		if s.ID == "version" {
			version = &s
		}
	}
	if version == nil || version.Env["TAG"] != "${{ github.ref_name }}" {
		t.Fatalf("no step version taking TAG from the tag: %+v", version)
	}
	app := chartAppVersion(t, chart)
	for _, tc := range []struct {
		tag, want string // want: the version, or a part of the error
	}{
		{"v" + app, "version=" + app},
		{"v9.9.9", "set appVersion"},
		{app, "is not v<semver>"},
		{"vnext", "is not v<semver>"},
	} {
		out := filepath.Join(t.TempDir(), "output")
		cmd := exec.Command("bash", "-e", "-c", version.Run)
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "TAG="+tc.tag, "GITHUB_OUTPUT="+out)
		msg, err := cmd.CombinedOutput()
		got, _ := os.ReadFile(out)
		switch ok := err == nil; {
		case strings.HasPrefix(tc.want, "version="):
			if !ok || strings.TrimSpace(string(got)) != tc.want {
				t.Errorf("tag %s: %v, output %q, %s; want %s", tc.tag, err, got, msg, tc.want)
			}
		default:
			if ok || !strings.Contains(string(msg), tc.want) || len(got) != 0 {
				t.Errorf("tag %s: %v, %s; want a failure saying %q", tc.tag, err, msg, tc.want)
			}
		}
	}
}

// TestCIWorkflow: pushes and pull requests run .ci/run, as root in the
// Debian image the Dockerfile builds on (its apt-get needs root), and
// build the image for both platforms without pushing it.
func TestCIWorkflow(t *testing.T) {
	t.Parallel()
	w := readWorkflow(t, "ci.yml")
	if !slices.Equal(w.events, []string{"pull_request", "push"}) || !slices.Contains(w.On.Push.Branches, "main") {
		t.Errorf("ci.yml runs on %v %+v, want pushes to main and pull requests", w.events, w.On.Push)
	}
	df, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ARG GO_VERSION=(\S+)$`).FindSubmatch(df)
	if m == nil {
		t.Fatal("the Dockerfile has no ARG GO_VERSION")
	}
	runsCI, buildsImage := false, false
	for job, steps := range w.steps() {
		for _, s := range steps {
			if strings.TrimSpace(s.Run) == "bash .ci/run" {
				runsCI = true
				if want := "golang:" + string(m[1]) + "-bookworm"; w.Jobs[job].Container != want {
					t.Errorf("job %s runs .ci/run in %q, want %s, the Dockerfile's build image", job, w.Jobs[job].Container, want)
				}
			}
			if strings.HasPrefix(s.Uses, "docker/build-push-action@") {
				buildsImage = s.With["push"] == false && strings.Contains(str(s.With["platforms"]), "linux/arm64")
			}
		}
	}
	if !runsCI || !buildsImage {
		t.Errorf("ci.yml: runs .ci/run %v, builds the image for arm64 without pushing %v", runsCI, buildsImage)
	}
}

func needsOf(v any) []string {
	switch n := v.(type) {
	case string:
		return []string{n}
	case []any:
		var out []string
		for _, e := range n {
			out = append(out, str(e))
		}
		return out
	}
	return nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
