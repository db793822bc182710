package bench

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuxray/gpuxray/collector/sim"
	"github.com/gpuxray/gpuxray/test/bench/simnode"
)

// Series budget of the demo node, so cardinality cannot creep up unnoticed:
// per GPU (device series, plus the allocation series of the pods holding
// it) and in all. Raise these only with a line in docs/scaling.md.
// The budget: 11 device gauges (info, utilization, memory used and total,
// power, energy, the three GPM ratios, unattributed memory, up) and 9
// windowed device counters × 2 windows make 29 device series per GPU; the
// demo's allocations add the rest. Raising a budget is a decision to record
// in the commit that does it.
const (
	budgetDeviceSeriesPerGPU = 29
	budgetSeriesPerGPU       = 39
	budgetSeriesDemoNode     = 312
)

func TestSeriesBudgetDemo(t *testing.T) {
	t.Parallel()
	sc := sim.Demo()
	n := simnode.New(t, sc, nil)
	// Series do not depend on the poll interval: poll every 10 s so that the
	// three hours run quickly under the race detector.
	n.Run(10*time.Second, 3*time.Hour)
	mfs, err := n.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total, device := 0, 0
	for _, mf := range mfs {
		total += len(mf.GetMetric())
		if strings.HasPrefix(mf.GetName(), "gpuxray_device_") {
			device += len(mf.GetMetric())
		}
	}
	t.Logf("demo node at 3h: %d series (%d device series) on %d GPUs: %.1f per GPU", total, device, sc.GPUs, float64(total)/float64(sc.GPUs))
	if got := float64(device) / float64(sc.GPUs); got > budgetDeviceSeriesPerGPU {
		t.Errorf("%.1f device series per GPU, budget %d", got, budgetDeviceSeriesPerGPU)
	}
	if got := float64(total) / float64(sc.GPUs); got > budgetSeriesPerGPU {
		t.Errorf("%.1f series per GPU, budget %d", got, budgetSeriesPerGPU)
	}
	if total > budgetSeriesDemoNode {
		t.Errorf("%d series on the demo node, budget %d", total, budgetSeriesDemoNode)
	}
}
