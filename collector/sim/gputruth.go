package sim

import "time"

// GPUTruth is the exact ground truth of one physical GPU over the whole
// scenario, counting the GPU's own time once however many pods share it:
// what the engine's device-level capacity counters must add up to.
type GPUTruth struct {
	GPU int
	// ObservedSeconds is the scenario's duration.
	ObservedSeconds float64
	// AllocatedSeconds is the time at least one pod held the GPU.
	AllocatedSeconds float64
	// AllocatedIdleSeconds is the allocated time in which every holder's
	// own busy ratio was below the threshold.
	AllocatedIdleSeconds float64
	// AllocatedActiveSeconds is the integral over allocated time of the
	// holders' busy ratios together, capped at 1.
	AllocatedActiveSeconds float64
	// UnallocatedSeconds is ObservedSeconds − AllocatedSeconds.
	UnallocatedSeconds float64
	// UnallocatedActiveSeconds is the integral of activity no holder owns:
	// the GPU's whole busy ratio while nobody holds it, unattributed
	// processes' while somebody does.
	UnallocatedActiveSeconds float64
}

// GPUTruth is the ground truth of every GPU, by index. A GPU in MIG mode
// (a fixed layout, or dynamic MIG devices made for DRA claims) is the sum
// of its MIG devices' allocated time, each weighted by its share of the
// GPU's compute slices; the rest of its time is unallocated.
func (s *Scenario) GPUTruth(threshold float64) []GPUTruth {
	pods := make([]series, len(s.Pods))
	for i := range s.Pods {
		pods[i] = s.podSeries(i)
	}
	out := make([]GPUTruth, s.GPUs)
	plan, _ := s.migPlan()
	for gpu := range s.GPUs {
		_, static := s.MIG[gpu]
		if static || s.MIGDynamic[gpu] {
			// Each MIG device's allocated time weighted by its share of
			// the GPU; the rest of the GPU's time, free slices and
			// devices nobody holds, is unallocated.
			t := GPUTruth{GPU: gpu, ObservedSeconds: s.Duration.Seconds()}
			for slot, name := range s.MIG[gpu] {
				if name == "" {
					continue
				}
				p, _ := systems[s.System].migProfile(name)
				d := s.heldTruth(s.holdersOf(func(d DeviceSpec) bool { return d.MIG && !d.Dynamic && d.GPU == gpu && d.MIGSlot == slot }),
					pods, series{}, nil, threshold)
				t.addAllocated(d, float64(p.info.SliceCount)/migComputeSlices)
			}
			for i := range plan {
				if h := &plan[i]; h.gpu == gpu {
					t.addAllocated(s.heldTruth(h.pods, pods, series{}, nil, threshold), float64(h.profile.info.SliceCount)/migComputeSlices)
				}
			}
			// Out of MIG mode, NVIDIA's DRA driver hands the GPU out whole.
			if whole := s.holdersOf(func(d DeviceSpec) bool { return !d.MIG && d.GPU == gpu }); len(whole) > 0 {
				t.addAllocated(s.heldTruth(whole, pods, series{}, nil, threshold), 1)
			}
			t.UnallocatedSeconds = t.ObservedSeconds - t.AllocatedSeconds
			out[gpu] = t
			continue
		}
		d := s.heldTruth(s.holdersOf(func(d DeviceSpec) bool { return !d.MIG && d.GPU == gpu }),
			pods, s.unallocatedSeries(gpu), s.withUnattributed(gpu, nil), threshold)
		d.GPU = gpu
		out[gpu] = d
	}
	return out
}

// addAllocated adds w times o's allocated figures.
func (t *GPUTruth) addAllocated(o GPUTruth, w float64) {
	t.AllocatedSeconds += w * o.AllocatedSeconds
	t.AllocatedIdleSeconds += w * o.AllocatedIdleSeconds
	t.AllocatedActiveSeconds += w * o.AllocatedActiveSeconds
	t.UnallocatedActiveSeconds += w * o.UnallocatedActiveSeconds
}

// holdersOf returns the pods holding a device that match.
func (s *Scenario) holdersOf(match func(DeviceSpec) bool) []int {
	var out []int
	for i, p := range s.Pods {
		if p.AdminAccess {
			continue // it holds nothing
		}
		for _, d := range p.Devices {
			if match(d) {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// heldTruth integrates one device held by the pods in holders, with un the
// activity nobody holds and extra the unattributed processes' ratios.
func (s *Scenario) heldTruth(holders []int, pods []series, un series, extra []series, threshold float64) GPUTruth {
	breaks := []time.Duration{s.Duration}
	parts := append([]series{un}, extra...)
	for _, i := range holders {
		breaks = append(breaks, s.Pods[i].From, s.Pods[i].To)
		parts = append(parts, pods[i])
	}
	end := s.Duration
	on := func(i int, t time.Duration) bool { return t >= s.Pods[i].From && t < s.Pods[i].To && t < end }
	held := func(t time.Duration) bool {
		for _, i := range holders {
			if on(i, t) {
				return true
			}
		}
		return false
	}
	unattributed := func(t time.Duration) float64 {
		v := 0.0
		for _, e := range extra {
			v += e.value(t)
		}
		return v
	}
	integral := func(f func(time.Duration) float64) float64 {
		return combine(breaks, parts, func(t time.Duration) float64 {
			if t >= end {
				return 0
			}
			return f(t)
		}).integral(0, end)
	}
	allocated := integral(func(t time.Duration) float64 { return b2f(held(t)) })
	return GPUTruth{
		ObservedSeconds:  end.Seconds(),
		AllocatedSeconds: allocated,
		AllocatedIdleSeconds: integral(func(t time.Duration) float64 {
			if !held(t) {
				return 0
			}
			for _, i := range holders {
				if on(i, t) && pods[i].value(t) >= threshold {
					return 0
				}
			}
			return 1
		}),
		AllocatedActiveSeconds: integral(func(t time.Duration) float64 {
			v := 0.0
			for _, i := range holders {
				if on(i, t) {
					v += pods[i].value(t)
				}
			}
			return min(v, 1)
		}),
		UnallocatedSeconds: end.Seconds() - allocated,
		UnallocatedActiveSeconds: integral(func(t time.Duration) float64 {
			if held(t) {
				return min(unattributed(t), 1)
			}
			return min(un.value(t)+unattributed(t), 1)
		}),
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
