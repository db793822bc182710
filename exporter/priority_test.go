package exporter

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

type classes map[string]int32

func (c classes) PriorityClasses() map[string]int32 { return c }

// TestPriorityClassCollector: one series per class, valued at the class's
// priority, negative and the system classes' included; promlint-clean.
func TestPriorityClassCollector(t *testing.T) {
	t.Parallel()
	c := NewPriorityClassCollector(classes{"train-high": 100000, "preemptible": -10, "system-node-critical": 2000001000})
	want := `# HELP gpuxray_priority_class_value The value of a PriorityClass of the cluster, as the API server lists it: the priority of the pods of that class.
# TYPE gpuxray_priority_class_value gauge
gpuxray_priority_class_value{priority_class="preemptible"} -10
gpuxray_priority_class_value{priority_class="system-node-critical"} 2.000001e+09
gpuxray_priority_class_value{priority_class="train-high"} 100000
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.CollectAndLint(c); err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
	if n := testutil.CollectAndCount(NewPriorityClassCollector(classes{})); n != 0 {
		t.Errorf("no classes: %d series", n)
	}
}
