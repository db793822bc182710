//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpuxray/gpuxray/report"
)

// replayBlocks replays scenario on a virtual clock (a scrape every scrape,
// a poll every poll) and backfills the exposition into TSDB blocks under
// blocks, with promtool.
func replayBlocks(t *testing.T, promtool, scenario, blocks, scrape, poll string) {
	t.Helper()
	om := blocks + ".om"
	f, err := os.Create(om)
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(binary, "replay", "--format=openmetrics", "--scrape.interval="+scrape, "--poll.interval="+poll, scenario)
	cmd.Stdout, cmd.Stderr = f, &stderr
	err = cmd.Run()
	f.Close()
	if err != nil {
		t.Fatalf("replay %s: %v\n%s", scenario, err, stderr.String())
	}
	backfillOpenMetrics(t, promtool, om, blocks)
}

// backfillOpenMetrics writes the OpenMetrics file om into TSDB blocks under
// blocks, with promtool.
func backfillOpenMetrics(t *testing.T, promtool, om, blocks string) {
	t.Helper()
	if out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", om, blocks).CombinedOutput(); err != nil {
		t.Fatalf("promtool tsdb create-blocks-from openmetrics %s: %v\n%s", om, err, out)
	}
}

// moveBlocks moves the TSDB blocks promtool wrote under src into the data
// directory data, which one Prometheus then serves.
func moveBlocks(t *testing.T, src, data string) {
	t.Helper()
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	bs, err := os.ReadDir(src)
	if err != nil || len(bs) == 0 {
		t.Fatalf("no blocks in %s: %v", src, err)
	}
	for _, b := range bs {
		if err := os.Rename(filepath.Join(src, b.Name()), filepath.Join(data, b.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// runReport runs `gpuxray report` against the Prometheus at addr and
// returns its standard output; it fails the test on a non-zero exit.
func runReport(t *testing.T, addr string, args ...string) []byte {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"report", "--prometheus=http://" + addr}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("gpuxray report %v: %v\n%s", args, err, stderr.String())
	}
	if stderr.Len() > 0 {
		t.Errorf("gpuxray report %v wrote to stderr (not a terminal): %s", args, stderr.String())
	}
	return stdout.Bytes()
}

// reportJSON is runReport with --format=json, decoded.
func reportJSON(t *testing.T, addr string, args ...string) report.Report {
	t.Helper()
	var r report.Report
	if err := json.Unmarshal(runReport(t, addr, append(args, "--format=json")...), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReportCountsSharedGPUsOnce replays a node of time-sliced GPUs into a
// real Prometheus and checks the report's GPU-capacity figures against the
// arithmetic in the scenario's header: every GPU's time once, so the funnel
// adds up to the GPUs owned and an idle pod on a busy shared GPU is not
// reclaimable capacity, while the workloads keep their own pod-seconds.
func TestReportCountsSharedGPUsOnce(t *testing.T) {
	t.Parallel()
	promtool := need(t, "promtool")
	prom := need(t, "prometheus")
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	replayBlocks(t, promtool, "testdata/report-shared.yaml", data, "1m", "10s")
	_, addr := startPrometheus(t, prom, filepath.Join(dir, "prom"), data, "global: {}\n")

	r := reportJSON(t, addr, "--step=10m", "--range=2h", "--end=2026-12-01T11:00:00Z")
	for _, f := range []struct {
		name string
		got  report.Funnel
	}{{"all", r.Funnel.All}, {"peak", r.Funnel.Peak}} {
		fu := f.got
		near(t, f.name+" owned GPU-hours", fu.Owned, 8)
		near(t, f.name+" allocated GPU-hours", fu.Allocated, 6)
		near(t, f.name+" unallocated GPU-hours", fu.Unallocated, 2)
		near(t, f.name+" allocated + unallocated = owned", fu.Allocated+fu.Unallocated, fu.Owned)
		near(t, f.name+" idle allocated GPU-hours", fu.Idle, 3)
		near(t, f.name+" active GPU-hours", fu.Active, 0.6*2+0.8*1)
		near(t, f.name+" busy unallocated GPU-hours", fu.UnallocatedActive, 0.25)
	}
	near(t, "reclaimable GPU-hours at peak", r.Demand.ReclaimableGPUHours, 3+2-0.25)
	near(t, "reclaimable GPUs at peak", r.Demand.ReclaimableGPUs, 4.75/2)
	near(t, "verdict's reclaimable GPUs", r.Verdict.ReclaimableGPUs, 4.75/2)

	// Pod-seconds stay each pod's own: notebook-a is idle on the busy GPU 0.
	want := map[string][2]float64{ // allocated, idle GPU-hours
		"search/embed":            {2, 0},
		"data-science/notebook-a": {2, 2},
		"data-science/notebook-b": {2, 2},
		"data-science/notebook-c": {2, 2},
		"research/train":          {2, 1},
	}
	got := map[string]report.Workload{}
	for _, w := range r.TopWorkloads {
		got[w.Namespace+"/"+w.Name] = w
	}
	for id, w := range want {
		g, ok := got[id]
		if !ok {
			t.Errorf("workload %s missing from %v", id, got)
			continue
		}
		near(t, fmt.Sprintf("%s allocated pod-hours", id), g.Allocated, w[0])
		near(t, fmt.Sprintf("%s idle pod-hours", id), g.Idle, w[1])
	}
}
