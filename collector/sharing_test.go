package collector_test

import (
	"reflect"
	"testing"

	"github.com/gpuxray/gpuxray/collector"
)

// TestHAMiDevices parses HAMi's hami.io/vgpu-devices-allocated as its
// EncodePodSingleDevice writes it: per container, init containers first,
// ";"-terminated; per device "<uuid>,<type>,<mem>,<cores>:".
func TestHAMiDevices(t *testing.T) {
	t.Parallel()
	const other = "GPU-4c0a2f3b-8d5e-4f90-ab2c-3d4e5f6a7b8c"
	containers := []string{"fetch", "vllm", "sidecar"}
	tests := []struct {
		name, annotation string
		want             map[string][]string
	}{
		{"one container", ";" + testGPU + ",NVIDIA,20000,30:;;", map[string][]string{"vllm": {testGPU}}},
		{"two devices", ";" + testGPU + ",NVIDIA,20000,30:" + other + ",NVIDIA,20000,30:;;", map[string][]string{"vllm": {testGPU, other}}},
		{"init and sidecar", testGPU + ",NVIDIA,1000,0:;;" + other + ",NVIDIA,1000,10:;", map[string][]string{"fetch": {testGPU}, "sidecar": {other}}},
		{"empty", "", nil},
		{"no devices", ";;;", nil},
		{"more entries than containers", ";;;" + testGPU + ",NVIDIA,1,1:;", nil},
		{"not a UUID", ";bogus,NVIDIA,1,1:;;", nil},
		{"a slice, not a GPU", ";" + testGPU + "::1,NVIDIA,1,1:;;", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := collector.HAMiDevices(tt.annotation, containers); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("HAMiDevices(%q) = %v, want %v", tt.annotation, got, tt.want)
			}
		})
	}
}

// TestKAIGroups reads KAI Scheduler's GPU group labels: runai-gpu-group, or
// runai-gpu-group/<group> for a fraction of several GPUs.
func TestKAIGroups(t *testing.T) {
	t.Parallel()
	got := collector.KAIGroups(map[string]string{"runai-gpu-group": "g2", "runai-gpu-group/g1": "g1", "runai-gpu-group/g2": "g2", "app": "x"})
	if want := []string{"g1", "g2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("KAIGroups = %v, want %v", got, want)
	}
	if got := collector.KAIGroups(map[string]string{"team": "a"}); got != nil {
		t.Errorf("KAIGroups of a pod of no group = %v", got)
	}
}
