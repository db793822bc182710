package sim

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// TestSpecRoundTrip writes every scenario of the repository back with
// ScenarioSpec.Marshal and parses it again: the Scenario is the same.
func TestSpecRoundTrip(t *testing.T) {
	t.Parallel()
	var files []string
	for _, glob := range []string{"testdata/*.yaml", "demo.yaml", "../../cmd/gpuxray/testdata/*.yaml", "../../test/scenarios/*.yaml", "../../test/e2e/testdata/*.yaml", "../../test/bench/*.yaml"} {
		m, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 40 {
		t.Fatalf("found %d scenarios, want the repository's 40 and more", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			want, err := ParseScenario(data, "s.yaml")
			if err != nil {
				t.Fatal(err)
			}
			spec, err := ParseScenarioSpec(data, "s.yaml")
			if err != nil {
				t.Fatal(err)
			}
			out, err := spec.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			got, err := ParseScenario(out, "s.yaml")
			if err != nil {
				t.Fatalf("written back, it does not parse: %v\n%s", err, out)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("written back, it parses to another scenario:\n%s", out)
			}
		})
	}
}
