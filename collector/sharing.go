package collector

import (
	"slices"
	"sort"
	"strings"
)

// Pod labels and annotations of the GPU-sharing schedulers gpuxray reads.
const (
	// AnnotationHAMiDevices is the annotation HAMi's scheduler writes on a
	// pod it placed: per container (init containers first, then the
	// others, ";"-separated), the devices it gave it (":"-separated), each
	// "<GPU UUID>,<type>,<memory MiB>,<cores %>"
	// (Project-HAMi/HAMi pkg/device/devices.go EncodePodSingleDevice;
	// pkg/device/nvidia/device.go SupportDevices).
	AnnotationHAMiDevices = "hami.io/vgpu-devices-allocated"
	// LabelKAIGPUGroup is KAI Scheduler's GPU group label, on a reservation
	// pod and on the fraction pods it holds the GPU for; a fraction of
	// several GPUs carries LabelKAIGPUGroup+"/<group>" labels instead
	// (NVIDIA/KAI-Scheduler pkg/common/constants: GPUGroup,
	// MultiGpuGroupLabelPrefix).
	LabelKAIGPUGroup = "runai-gpu-group"
	// AnnotationKAIFractionContainer names the container of a fraction pod
	// that gets the GPU; without it, the first container does
	// (constants.GpuFractionContainerName).
	AnnotationKAIFractionContainer = "gpu-fraction-container-name"
	// KAIReservationNamespace is where KAI Scheduler runs its reservation
	// pods (constants.DefaultResourceReservationName).
	KAIReservationNamespace = "kai-resource-reservation"
)

// HAMiDevices parses HAMi's device annotation into the GPU UUIDs of each
// container, given the pod's init containers' names and then its other
// containers', in spec order: the annotation's entries follow that order,
// empty for a container HAMi gave nothing. It returns nil when the
// annotation names no device, and skips an entry for which there is no
// container, or a device that is not a GPU UUID.
func HAMiDevices(annotation string, containers []string) map[string][]string {
	if annotation == "" {
		return nil
	}
	var out map[string][]string
	for i, entry := range strings.Split(annotation, ";") {
		if i >= len(containers) {
			break
		}
		for _, dev := range strings.Split(entry, ":") {
			uuid, _, ok := strings.Cut(dev, ",")
			if !ok {
				continue
			}
			ref, err := ParseDeviceID(uuid)
			if err != nil || ref.Kind != RefUUID || ref.Replicated {
				continue
			}
			if out == nil {
				out = map[string][]string{}
			}
			out[containers[i]] = append(out[containers[i]], ref.UUID)
		}
	}
	return out
}

// KAIGroups returns the KAI Scheduler GPU groups a pod's labels name,
// sorted.
func KAIGroups(labels map[string]string) []string {
	var out []string
	for k, v := range labels {
		switch {
		case k == LabelKAIGPUGroup && v != "":
			out = append(out, v)
		case strings.HasPrefix(k, LabelKAIGPUGroup+"/") && v != "":
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}
