package fleet

import (
	"os"
	"regexp"
	"testing"
)

// TestCIRun: .ci/run installs the engine by its Debian package names and
// sets CI, without which testtool.Need skips TestFleet where the engine is
// missing and CI passes without it.
func TestCIRun(t *testing.T) {
	b, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, re := range []string{
		`(?m)^export CI=`,
		`need_apt\+=\(victoria-metrics\)`,
		`need_apt\+=\(prometheus-alertmanager\)`,
	} {
		if !regexp.MustCompile(re).MatchString(s) {
			t.Errorf(".ci/run lacks %s", re)
		}
	}
}
