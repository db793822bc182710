package sim

import "time"

// SampledTruth is Truth at the driver's resolution: IdleSeconds counts the
// sample periods (1/6 s) in which the pod's own mean busy ratio, as NVML
// reports it in whole percent, was below threshold. No reader of NVML can
// resolve idleness finer than a sample period, so a burst shorter than one
// (200 ms of work spills into a second period) makes Truth and SampledTruth
// differ; AllocatedSeconds and ActiveSeconds are Truth's.
func (s *Scenario) SampledTruth(threshold float64) []TruthRow {
	rows := s.Truth(threshold)
	r := 0
	for i, p := range s.Pods {
		if p.AdminAccess {
			continue // Truth has no row of it
		}
		ser := s.podSeries(i)
		first := int64(p.From/SamplePeriod) + 1
		last := int64((p.To - 1) / SamplePeriod)
		var idle float64
		for k := first; k <= last; k++ {
			if float64(percent(ser, k))/100 < threshold {
				idle += SamplePeriod.Seconds()
			}
		}
		// The partial periods at either end count by the pod's own value.
		if head := time.Duration(first-1)*SamplePeriod + SamplePeriod - p.From; head > 0 {
			idle += ser.below(threshold, p.From, p.From+min(head, p.To-p.From))
		}
		if tail := p.To - time.Duration(last)*SamplePeriod; last >= first && tail > 0 {
			idle += ser.below(threshold, p.To-tail, p.To)
		}
		for range p.Devices {
			rows[r].IdleSeconds = idle
			r++
		}
	}
	return rows
}
