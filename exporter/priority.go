package exporter

import (
	"github.com/prometheus/client_golang/prometheus"
)

// PriorityClassSource is what knows the cluster's PriorityClasses:
// pods.PriorityClasses on a node, the scenario on a simulated one.
type PriorityClassSource interface {
	// PriorityClasses returns each class's value by name; the map is the
	// caller's.
	PriorityClasses() map[string]int32
}

// PriorityClassCollector renders gpuxray_priority_class_value, one series
// per PriorityClass. kube-state-metrics names a pending pod's class but not
// its value, so the rules read the values here to compare waiting pods'
// priority with that of the pods holding idle GPUs. Every agent exports the
// same few series; rules take their max by class.
type PriorityClassCollector struct{ src PriorityClassSource }

// NewPriorityClassCollector returns the collector of src's classes.
func NewPriorityClassCollector(src PriorityClassSource) *PriorityClassCollector {
	return &PriorityClassCollector{src: src}
}

// Describe implements prometheus.Collector.
func (c *PriorityClassCollector) Describe(ch chan<- *prometheus.Desc) { ch <- priorityClassValue }

// Collect implements prometheus.Collector.
func (c *PriorityClassCollector) Collect(ch chan<- prometheus.Metric) {
	for name, v := range c.src.PriorityClasses() {
		ch <- prometheus.MustNewConstMetric(priorityClassValue, prometheus.GaugeValue, float64(v), labelValues([]string{name})...)
	}
}
