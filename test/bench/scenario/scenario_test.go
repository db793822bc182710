//go:build e2e

package scenario

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// TestCommittedCurrent checks that the committed scenarios are what the
// generator writes, and that every generated scenario is valid.
func TestCommittedCurrent(t *testing.T) {
	t.Parallel()
	for name, gen := range Files() {
		got, err := os.ReadFile(filepath.Join("..", name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, gen()) {
			t.Errorf("test/bench/%s is not what the generator writes: run go run ./test/bench/gen", name)
		}
	}
	if testing.Short() {
		return
	}
	for name, gen := range map[string]func() []byte{"node-110.yaml": Node110, "mig-56.yaml": MIG56, "churn-24h.yaml": Churn24h} {
		sc, err := sim.ParseScenario(gen(), name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "churn-24h.yaml" && (len(sc.Pods) < 9000 || len(sc.Pods) > 11000) {
			t.Errorf("churn-24h has %d pods, want about 10,000", len(sc.Pods))
		}
	}
}
