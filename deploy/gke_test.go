package deploy

import "testing"

// TestGKEDriver: on GKE nodes whose driver GKE installs there is no NVIDIA
// container toolkit to mount NVML into the agent; as GKE's own DCGM
// exporter (GoogleCloudPlatform/prometheus-engine,
// examples/nvidia-dcgm/exporter.yaml) the agent then mounts the driver
// folder /home/kubernetes/bin/nvidia at /usr/local/nvidia, finds
// libnvidia-ml.so.1 through LD_LIBRARY_PATH, and runs privileged for the
// GPUs' device nodes: Helm's gkeDriver.enabled and the gke-driver component.
func TestGKEDriver(t *testing.T) {
	t.Parallel()
	t.Run("helm", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "gkeDriver: {enabled: true}\n"))
		checkManifest(t, m, expect{namespace: "gpuxray", gkeDriver: true})
	})
	t.Run("kustomize", func(t *testing.T) {
		t.Parallel()
		dir := overlayDir(t, "kubernetes/base", nil, []string{"kubernetes/components/gke-driver"}, "")
		checkManifest(t, kustomizeBuild(t, dir), expect{namespace: "gpuxray", gkeDriver: true})
	})
}
