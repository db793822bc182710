package report

import (
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// queueBenchInput is a cluster of n/8 nodes of 8 GPUs and n waiting pods,
// every query answering n series, over a day at a 5-minute step (issue
// #31: a query of 50,000 series ran the old matching for CPU-minutes).
// Each pod waits an hour for 1 to 8 GPUs of one of two types, of one of
// four classes; every GPU has its own holder, idle half the time; each
// node has a GPU free; and there are n Kueue ClusterQueues.
func queueBenchInput(n int) (input, queueInput, []float64) {
	const steps = 288
	g := grid{start: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), step: 5 * time.Minute, n: steps}
	in := input{g: g, covered: make([]float64, steps), demandCovered: make([]float64, steps)}
	peak := make([]float64, steps)
	for i := range in.covered {
		in.covered[i], in.demandCovered[i] = 300, 300
		if i >= 108 && i < 216 {
			peak[i] = 1
		}
	}
	var qi queueInput
	types := []string{"NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"}
	classes := []string{"training", "batch", "inference", "notebook"}
	for i, c := range classes {
		qi.classes = append(qi.classes, ser(map[string]string{"priority_class": c}, steps, always(float64(1000-i*300))))
	}
	for p := range n {
		name := "p-" + strconv.Itoa(p)
		from := (p * 7) % (steps - 12)
		l := map[string]string{"namespace": "ns-" + strconv.Itoa(p%50), "pod": name}
		qi.pods = append(qi.pods, ser(l, steps, steps2(from, from+12, float64(1+p%8))))
		qi.podClass = append(qi.podClass, ser(withLabel(l, "priority_class", classes[p%4]), steps, steps2(from, from+12, 1)))
		qi.podType = append(qi.podType, ser(withLabel(l, "gpu_type", GPUProduct(types[p%2])), steps, steps2(from, from+12, 1)))
		qi.podCreated = append(qi.podCreated, ser(l, steps, steps2(from, from+12, float64(g.start.Unix()))))
	}
	nodes := max(1, n/8)
	for nd := range nodes {
		node := map[string]string{"job": "gpuxray", "instance": "node-" + strconv.Itoa(nd), "name": types[nd%2]}
		qi.free = append(qi.free, ser(node, steps, always(300)))
		for k := range 8 {
			h := withLabel(withLabel(withLabel(node, "namespace", "team-"+strconv.Itoa(nd%20)), "workload", fmt.Sprintf("w-%d-%d", nd, k)), "priority_class", classes[(nd+k)%4])
			qi.holders = append(qi.holders, ser(h, steps, func(i int) (float64, bool) { return 300, (i+k)%2 == 0 }))
		}
	}
	for c := range n {
		l := map[string]string{"cluster_queue": "cq-" + strconv.Itoa(c)}
		qi.kueueUsage = append(qi.kueueUsage, ser(l, steps, always(float64(c%5))))
		qi.kueueNominal = append(qi.kueueNominal, ser(l, steps, always(2)))
	}
	return in, qi, peak
}

func steps2(from, to int, x float64) func(int) (float64, bool) {
	return func(i int) (float64, bool) { return x, i >= from && i < to }
}

// BenchmarkComputeQueue matches waiting pods to nodes for every step of a
// day, at 5,000 and 50,000 series a query: near-linear, the second costs
// about ten times the first.
func BenchmarkComputeQueue(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			in, qi, peak := queueBenchInput(n)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for range b.N {
				q := computeQueue(in, qi, peak, queueConfig{top: 10, available: true})
				if q.All.PendingGPUHours == 0 {
					b.Fatal("nothing waited")
				}
			}
			// CPU time as well as wall time: on a machine shared with other
			// work the wall time says more about the others.
			b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
