package deploy

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

const chart = "helm/gpuxray"

// writeValues writes a values file for helm's -f.
func writeValues(t *testing.T, values string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(p, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// helmTemplate renders the chart as release "gpuxray" in namespace ns.
func helmTemplate(t *testing.T, chartDir, ns string, valueFiles ...string) ([]byte, error) {
	t.Helper()
	args := []string{"template", "gpuxray", chartDir, "--namespace", ns}
	for _, f := range valueFiles {
		args = append(args, "-f", f)
	}
	return output(t, need(t, "helm"), args...)
}

func helmManifest(t *testing.T, chartDir, ns string, valueFiles ...string) *manifest {
	t.Helper()
	out, err := helmTemplate(t, chartDir, ns, valueFiles...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	m, err := decodeManifest(out)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	return m
}

// nonDefault sets a value of nearly every kind the chart has.
const nonDefault = `
image: {repository: registry.example/gpuxray, tag: v9.9.9, pullPolicy: Always}
agent:
  pollInterval: 2s
  pollTimeout: 3s
  idleThreshold: 0.1
  retention: 30m
  sampleMaxGap: 4s
  idleSource: gpm
  limits: {maxAllocations: 1000000}
  kubelet:
    podResourcesSocket: /var/lib/kubelet/pod-resources/kubelet.sock
    timeout: 7s
    resourceNames: [example.com/gpu, example.com/vgpu]
  pods:
    enabled: false
    extraLabels: {team: team, cost_center: billing/cost-center}
    modelKeys: [example.com/model, model]
  dra: {enabled: false}
  kubeconfig: /etc/gpuxray/kubeconfig
  procRoot: /host/proc
  peak:
    schedule: "Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00"
    timezone: Europe/Berlin
  log: {level: debug, format: console}
  extraArgs: [--web.enable-pprof]
processAttribution: true
web:
  port: 9500
  healthPort: 9501
  telemetryPath: /gpu-metrics
  config:
    tls_server_config: {cert_file: /etc/gpuxray/tls/tls.crt, key_file: /etc/gpuxray/tls/tls.key}
    basic_auth_users: {prometheus: "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"}
  tlsSecret: gpuxray-tls
runtimeClassName: nvidia
extraEnv:
  - {name: GOMAXPROCS, value: "1"}
resources:
  requests: {cpu: 20m, memory: 48Mi}
  limits: {memory: 256Mi}
nodeSelector: {node-role.example/gpu: "true"}
tolerations:
  - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}
  - {key: dedicated, operator: Equal, value: ml, effect: NoSchedule}
serviceMonitor:
  enabled: true
  interval: 15s
  additionalLabels: {release: kube-prometheus-stack}
  relabelings:
    - {sourceLabels: [__meta_kubernetes_pod_label_team], targetLabel: team}
  scheme: https
  tlsConfig: {insecureSkipVerify: true}
prometheusRule:
  enabled: %RULE%
  additionalLabels: {release: kube-prometheus-stack}
dashboards:
  enabled: true
  annotations: {grafana_folder: GPUs}
`

func TestHelmTemplate(t *testing.T) {
	t.Parallel()
	rule, dashboards := monitoringSources(t, ".")
	t.Run("default values", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "monitoring")
		checkManifest(t, m, expect{namespace: "monitoring"})
		c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]
		if want := "ghcr.io/gpuxray/gpuxray:" + chartAppVersion(t, chart); c.Image != want {
			t.Errorf("image %s, want %s", c.Image, want)
		}
		// The defaults are the agent's own, spelt out.
		for _, f := range []string{
			"--web.listen-address=:9471", "--web.health-listen-address=:9472", "--web.telemetry-path=/metrics",
			"--web.max-requests=40", "--poll.interval=1s", "--idle.threshold=0.05", "--retention=10m",
			"--idle.source=samples", "--limits.max-allocations=2000",
			"--kubelet.pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock",
			"--peak.schedule=Mon-Fri 09:00-18:00", "--peak.timezone=UTC", "--log.format=json",
			"--pods.enabled=true", "--node.name=$(NODE_NAME)", "--proc.root=/proc",
			"--dra.enabled=true", "--dra.drivers=gpu.nvidia.com", "--dra.uuid-attribute=uuid",
		} {
			if !slices.Contains(c.Args, f) {
				t.Errorf("args %q lack %s", c.Args, f)
			}
		}
		for _, f := range []string{"web.config.file", "web.enable-pprof", "kubelet.resource-names", "pods.extra-labels", "pods.model-keys", "kubeconfig"} {
			if slices.ContainsFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--"+f) }) {
				t.Errorf("args %q hold --%s by default", c.Args, f)
			}
		}
		if len(all[corev1.Secret](m)) != 0 {
			t.Error("a Secret without a web configuration")
		}
	})
	t.Run("DRA values", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "monitoring", writeValues(t, "agent: {dra: {drivers: [gpu.nvidia.com, gpu.example.com], uuidAttribute: gpu.nvidia.com/uuid}}\n"))
		checkManifest(t, m, expect{namespace: "monitoring"})
		c := one[appsv1.DaemonSet](t, m).Spec.Template.Spec.Containers[0]
		for _, f := range []string{"--dra.enabled=true", "--dra.drivers=gpu.nvidia.com,gpu.example.com", "--dra.uuid-attribute=gpu.nvidia.com/uuid"} {
			if !slices.Contains(c.Args, f) {
				t.Errorf("args %q lack %s", c.Args, f)
			}
		}
	})
	t.Run("non-default values", func(t *testing.T) {
		t.Parallel()
		values := writeValues(t, strings.Replace(nonDefault, "%RULE%", map[bool]string{true: "true", false: "false"}[rule != ""], 1))
		m := helmManifest(t, chart, "gpu-monitoring", values)
		checkManifest(t, m, expect{namespace: "gpu-monitoring", hostPID: true, serviceMonitor: true, rule: rule != "", dashboards: len(dashboards), noDRA: true, release: "kube-prometheus-stack"})
		ds := one[appsv1.DaemonSet](t, m)
		pod := ds.Spec.Template.Spec
		c := pod.Containers[0]
		for _, f := range []string{
			"--web.listen-address=:9500", "--web.health-listen-address=:9501", "--web.telemetry-path=/gpu-metrics",
			"--web.config.file=/etc/gpuxray/web/web-config.yml", "--web.enable-pprof",
			"--poll.interval=2s", "--poll.timeout=3s", "--idle.threshold=0.1", "--retention=30m", "--sample.max-gap=4s",
			"--idle.source=gpm", "--limits.max-allocations=1000000",
			"--kubelet.timeout=7s", "--kubelet.resource-names=example.com/gpu,example.com/vgpu",
			"--peak.schedule=Mon-Fri 08:00-12:30,13:30-19:00; Sat 10:00-14:00", "--peak.timezone=Europe/Berlin",
			"--log.level=debug", "--log.format=console",
			"--pods.enabled=false", "--pods.extra-labels=cost_center=billing/cost-center,team=team",
			"--pods.model-keys=example.com/model,model", "--kubeconfig=/etc/gpuxray/kubeconfig", "--proc.root=/host/proc",
			"--dra.enabled=false",
		} {
			if !slices.Contains(c.Args, f) {
				t.Errorf("args %q lack %s", c.Args, f)
			}
		}
		if slices.ContainsFunc(c.Args, func(a string) bool {
			return strings.HasPrefix(a, "--dra.drivers") || strings.HasPrefix(a, "--dra.uuid-attribute")
		}) {
			t.Errorf("args %q name DRA drivers with DRA off", c.Args)
		}
		checks := []struct {
			what string
			ok   bool
		}{
			{"image", c.Image == "registry.example/gpuxray:v9.9.9" && c.ImagePullPolicy == corev1.PullAlways},
			{"runtimeClassName", pod.RuntimeClassName != nil && *pod.RuntimeClassName == "nvidia"},
			{"nodeSelector", pod.NodeSelector["node-role.example/gpu"] == "true"},
			{"extra toleration", len(pod.Tolerations) == 2 && pod.Tolerations[1].Key == "dedicated"},
			{"extra env", envValue(c.Env, "GOMAXPROCS") == "1"},
			{"memory limit", c.Resources.Limits.Memory().String() == "256Mi"},
			{"web config mounted", hasMount(c, "web-config", "/etc/gpuxray/web")},
			{"TLS Secret mounted", hasMount(c, "tls", "/etc/gpuxray/tls") && hasSecretVolume(pod, "tls", "gpuxray-tls")},
		}
		for _, ch := range checks {
			if !ch.ok {
				t.Errorf("%s: not as set", ch.what)
			}
		}
		// The web configuration reaches the agent as the file exporter-toolkit reads.
		sec := one[corev1.Secret](t, m)
		if !hasSecretVolume(pod, "web-config", sec.Name) {
			t.Errorf("the web-config volume does not mount Secret %s", sec.Name)
		}
		var wc struct {
			TLS struct {
				CertFile string `json:"cert_file"`
				KeyFile  string `json:"key_file"`
			} `json:"tls_server_config"`
			Users map[string]string `json:"basic_auth_users"`
		}
		if err := yaml.UnmarshalStrict([]byte(sec.StringData["web-config.yml"]), &wc); err != nil {
			t.Fatalf("web-config.yml: %v", err)
		}
		if wc.TLS.CertFile != "/etc/gpuxray/tls/tls.crt" || wc.Users["prometheus"] != "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi" {
			t.Errorf("web-config.yml = %+v, not the values' web.config", wc)
		}
		sm := one[monitoringv1.ServiceMonitor](t, m)
		ep := sm.Spec.Endpoints[0]
		if sm.Labels["release"] != "kube-prometheus-stack" || ep.Interval != "15s" || ep.Path != "/gpu-metrics" ||
			ep.Scheme == nil || ep.Scheme.String() != "https" || len(ep.RelabelConfigs) != 2 || ep.RelabelConfigs[1].TargetLabel != "team" {
			t.Errorf("ServiceMonitor %+v: not as set", sm)
		}
		if rule != "" {
			// Without overrides, the packaged rules pass through unchanged,
			// Prometheus' own {{ $value }} templates included.
			b, err := os.ReadFile(filepath.Join(chartFilesDir, filepath.Base(rule)))
			if err != nil {
				t.Fatal(err)
			}
			var src monitoringv1.PrometheusRule
			if err := yaml.UnmarshalStrict(b, &src); err != nil {
				t.Fatal(err)
			}
			got := one[monitoringv1.PrometheusRule](t, m)
			if !reflect.DeepEqual(got.Spec, src.Spec) {
				t.Errorf("the chart's PrometheusRule spec differs from %s", rule)
			}
			if got.Labels["release"] != "kube-prometheus-stack" {
				t.Errorf("PrometheusRule labels %v lack additionalLabels", got.Labels)
			}
		}
		for _, cm := range all[corev1.ConfigMap](m) {
			if cm.Annotations["grafana_folder"] != "GPUs" {
				t.Errorf("dashboard %s lacks the folder annotation", cm.Name)
			}
		}
	})
	t.Run("pod monitor", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "podMonitor: {enabled: true, interval: 1m}\n"))
		checkManifest(t, m, expect{namespace: "gpuxray", podMonitor: true})
		if pm := one[monitoringv1.PodMonitor](t, m); pm.Spec.PodMetricsEndpoints[0].Interval != "1m" {
			t.Errorf("PodMonitor interval %q, want 1m", pm.Spec.PodMetricsEndpoints[0].Interval)
		}
	})
	t.Run("victoriametrics operator", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "vm", writeValues(t, `
vmServiceScrape:
  enabled: true
  interval: 15s
  additionalLabels: {team: gpus}
  relabelConfigs: [{sourceLabels: [__meta_kubernetes_pod_label_team], targetLabel: team}]
  scheme: https
  tlsConfig: {insecureSkipVerify: true}
vmRule: {enabled: true, additionalLabels: {team: gpus}}
`))
		checkManifest(t, m, expect{namespace: "vm", vmServiceScrape: true, vmRule: true})
		checkVMRuleIsTheRuleFile(t, m)
		ss := one[vmServiceScrape](t, m)
		ep := ss.Spec.Endpoints[0]
		if ss.Labels["team"] != "gpus" || ep.Interval != "15s" || ep.Path != "/metrics" || ep.Scheme != "https" ||
			len(ep.RelabelConfigs) != 2 || ep.RelabelConfigs[1].TargetLabel != "team" || ep.TLSConfig["insecureSkipVerify"] != true {
			t.Errorf("VMServiceScrape %+v: not as set", ss)
		}
		if r := one[vmRule](t, m); r.Labels["team"] != "gpus" {
			t.Errorf("VMRule labels %v lack additionalLabels", r.Labels)
		}
		m = helmManifest(t, chart, "vm", writeValues(t, "vmPodScrape: {enabled: true, interval: 1m}\n"))
		checkManifest(t, m, expect{namespace: "vm", vmPodScrape: true})
		if ps := one[vmPodScrape](t, m); ps.Spec.PodMetricsEndpoints[0].Interval != "1m" {
			t.Errorf("VMPodScrape interval %q, want 1m", ps.Spec.PodMetricsEndpoints[0].Interval)
		}
	})
	t.Run("existing web config Secret", func(t *testing.T) {
		t.Parallel()
		m := helmManifest(t, chart, "gpuxray", writeValues(t, "web: {existingConfigSecret: my-web-config}\n"))
		pod := one[appsv1.DaemonSet](t, m).Spec.Template.Spec
		if len(all[corev1.Secret](m)) != 0 || !hasSecretVolume(pod, "web-config", "my-web-config") ||
			!slices.Contains(pod.Containers[0].Args, "--web.config.file=/etc/gpuxray/web/web-config.yml") {
			t.Error("an existing web config Secret is not mounted and used as is")
		}
	})
}

// TestHelmSecuredEndpointExample renders docs/install.md's secured-endpoint
// values.
func TestHelmSecuredEndpointExample(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(installDocs)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\nweb:\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/install.md has no ```yaml block of web: values")
	}
	values := "web:\n" + strings.Replace(example, "$2y$10$...", "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi", 1)
	values = strings.Replace(values, "serviceMonitor:\n", "serviceMonitor:\n  enabled: true\n", 1)
	m := helmManifest(t, chart, "gpuxray", writeValues(t, values))
	checkManifest(t, m, expect{namespace: "gpuxray", serviceMonitor: true})
	ep := one[monitoringv1.ServiceMonitor](t, m).Spec.Endpoints[0]
	if ep.Scheme == nil || ep.Scheme.String() != "https" || ep.BasicAuth == nil || ep.BasicAuth.Username.Name != "gpuxray-scrape" ||
		ep.TLSConfig == nil || ep.TLSConfig.CA.Secret == nil || ep.TLSConfig.CA.Secret.Name != "gpuxray-tls" {
		t.Errorf("ServiceMonitor endpoint %+v: not the docs' https, CA and basic auth", ep)
	}
	pod := one[appsv1.DaemonSet](t, m).Spec.Template.Spec
	if !hasSecretVolume(pod, "tls", "gpuxray-tls") || !slices.Contains(pod.Containers[0].Args, "--web.config.file=/etc/gpuxray/web/web-config.yml") {
		t.Error("the docs' web config is not mounted and used")
	}
}

func hasMount(c corev1.Container, name, path string) bool {
	return slices.ContainsFunc(c.VolumeMounts, func(vm corev1.VolumeMount) bool {
		return vm.Name == name && vm.MountPath == path && vm.ReadOnly
	})
}

func hasSecretVolume(pod corev1.PodSpec, name, secret string) bool {
	return slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
		return v.Name == name && v.Secret != nil && v.Secret.SecretName == secret
	})
}

func TestHelmLint(t *testing.T) {
	t.Parallel()
	helm := need(t, "helm")
	for name, values := range map[string]string{"default": "", "non-default": strings.Replace(nonDefault, "%RULE%", "false", 1)} {
		args := []string{"lint", "--strict", chart}
		if values != "" {
			args = append(args, "-f", writeValues(t, values))
		}
		if out, err := output(t, helm, args...); err != nil {
			t.Errorf("helm lint with %s values: %v\n%s", name, err, out)
		}
	}
}

// TestHelmValuesSchema: values.schema.json fails an install with a wrong
// type or a misspelt key, naming it.
func TestHelmValuesSchema(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, values, want string
	}{
		{"wrong type", "agent: {idleThreshold: high}\n", "idleThreshold"},
		{"not a ratio", "agent: {idleThreshold: 1.5}\n", "idleThreshold"},
		{"not a duration", "agent: {pollInterval: soon}\n", "pollInterval"},
		{"unknown key", "agent: {pollIntervall: 2s}\n", "pollIntervall"},
		{"unknown top-level key", "serviceMonitors: {enabled: true}\n", "serviceMonitors"},
		{"port out of range", "web: {port: 70000}\n", "port"},
		{"not a count", "agent: {limits: {maxAllocations: 1.5}}\n", "maxAllocations"},
		{"unknown idle source", "agent: {idleSource: dcgm}\n", "idleSource"},
		{"unknown web config key", "web: {config: {basic_auth_user: {a: b}}}\n", "basic_auth_user"},
		{"bad DRA driver", "agent: {dra: {drivers: [GPU NVIDIA]}}\n", "drivers"},
		{"no DRA driver", "agent: {dra: {drivers: []}}\n", "drivers"},
		{"bad DRA UUID attribute", "agent: {dra: {uuidAttribute: the uuid}}\n", "uuidAttribute"},
		{"GOMEMLIMIT in Kubernetes units", "goMemLimit: 96Mi\n", "goMemLimit"},
		{"a system priority value", "priorityClass: {value: 2000000000}\n", "value"},
		{"unknown preemption policy", "priorityClass: {preemptionPolicy: Always}\n", "preemptionPolicy"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := helmTemplate(t, chart, "gpuxray", writeValues(t, tc.values))
			if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template with %q: %v; want a schema error naming %s", tc.values, err, tc.want)
			}
		})
	}
}
