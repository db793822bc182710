package sim

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"
)

// UnscheduledPod is a pod that requests GPUs and that no node has taken:
// over [From, To) it waits, Pending and bound to no node, as the scheduler
// leaves a pod that fits nowhere. The simulated node never sees it; only
// kube-state-metrics' view of the cluster (KubeState) shows it.
type UnscheduledPod struct {
	Namespace string
	Name      string
	Container string
	Owner     Owner
	// Resource is the extended resource the pod requests GPUs of.
	Resource string
	GPUs     int
	// From and To bound the wait: [From, To).
	From, To time.Duration
}

var unscheduledKeys = []string{"namespace", "name", "container", "owner", "resource", "gpus", "from", "to"}

func (d *decoder) unscheduled(n *yaml.Node, s *Scenario) error {
	items, err := d.seq(n, "unscheduled")
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for i, p := range s.Pods {
		seen[p.Namespace+"/"+p.Name] = fmt.Sprintf("pods[%d]", i)
	}
	for i, it := range items {
		p := fmt.Sprintf("unscheduled[%d]", i)
		m, err := d.mapping(it, p, unscheduledKeys...)
		if err != nil {
			return err
		}
		u := UnscheduledPod{Container: "main", Resource: ResourceGPU, GPUs: 1, To: s.Duration}
		for _, k := range []string{"namespace", "name"} {
			if m[k] == nil {
				return d.errf(it, join(p, k), "missing")
			}
		}
		if u.Namespace, err = d.str(m["namespace"], p+".namespace"); err != nil {
			return err
		}
		if u.Name, err = d.str(m["name"], p+".name"); err != nil {
			return err
		}
		key := u.Namespace + "/" + u.Name
		if prev, dup := seen[key]; dup {
			return d.errf(m["name"], p+".name", "%s is already %s", key, prev)
		}
		seen[key] = p
		if c := m["container"]; c != nil {
			if u.Container, err = d.str(c, p+".container"); err != nil {
				return err
			}
		}
		if o := m["owner"]; o != nil {
			if u.Owner, err = d.owner(o, p+".owner"); err != nil {
				return err
			}
		}
		if r := m["resource"]; r != nil {
			if u.Resource, err = d.str(r, p+".resource"); err != nil {
				return err
			}
			if u.Resource != ResourceGPU && u.Resource != ResourceGPUShared && !strings.HasPrefix(u.Resource, ResourceMIGPrefix) {
				return d.errf(r, p+".resource", "%q is not %s, %s or %s<profile>", u.Resource, ResourceGPU, ResourceGPUShared, ResourceMIGPrefix)
			}
		}
		if g := m["gpus"]; g != nil {
			n, err := d.integer(g, p+".gpus", 1, 1024)
			if err != nil {
				return err
			}
			u.GPUs = int(n)
		}
		if n := m["from"]; n != nil {
			if u.From, err = d.offset(n, p+".from", s.Duration); err != nil {
				return err
			}
		}
		if n := m["to"]; n != nil {
			if u.To, err = d.offset(n, p+".to", s.Duration); err != nil {
				return err
			}
		}
		if u.From >= u.To {
			n := m["to"]
			if n == nil {
				n = m["from"]
			}
			return d.errf(n, p+".to", "%s is not after from (%s)", fmtDur(u.To), fmtDur(u.From))
		}
		s.Unscheduled = append(s.Unscheduled, u)
	}
	return nil
}

// kube-state-metrics' pod series, with its label names.
var (
	ksmPodInfo = prometheus.NewDesc("kube_pod_info", "[STABLE] Information about pod.",
		[]string{"namespace", "pod", "uid", "host_ip", "pod_ip", "node", "created_by_kind", "created_by_name", "priority_class", "host_network"}, nil)
	ksmPodPhase = prometheus.NewDesc("kube_pod_status_phase", "[STABLE] The pods current phase.",
		[]string{"namespace", "pod", "uid", "phase"}, nil)
	ksmPodRequests = prometheus.NewDesc("kube_pod_container_resource_requests",
		"[STABLE] The number of requested request resource by a container. It is recommended to use the kube_pod_resource_requests metric exposed by kube-scheduler instead, as it is more precise.",
		[]string{"namespace", "pod", "uid", "container", "node", "resource", "unit"}, nil)
)

// ksmPhases are the phases kube-state-metrics writes a series for, each pod.
var ksmPhases = []string{"Pending", "Succeeded", "Failed", "Unknown", "Running"}

// ksmUnsafe is what kube-state-metrics replaces with "_" in a resource name
// to make it a label value: nvidia.com/gpu is nvidia_com_gpu.
var ksmUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// KubeState returns the series kube-state-metrics would serve for the
// scenario's pods at the clock's now, with its metric names, label names
// and values: kube_pod_info, kube_pod_status_phase (a series per phase, 1
// for the pod's) and kube_pod_container_resource_requests of the GPU
// resource (unit="integer"). The node's pods are bound to the node, and
// Pending before from, Running, then Succeeded, as Pod says; an unscheduled
// pod is there only within its [from, to), Pending and bound to no node
// (node=""). gpuxray's rules join these with the agent's series
// (GPUPodsPendingWhileGPUsIdle). The agent never serves them: only
// `agent --simulate` does, on a path of its own.
func (n *Node) KubeState() prometheus.Collector { return kubeState{n} }

type kubeState struct{ n *Node }

func (k kubeState) Describe(ch chan<- *prometheus.Desc) {
	ch <- ksmPodInfo
	ch <- ksmPodPhase
	ch <- ksmPodRequests
}

func (k kubeState) Collect(ch chan<- prometheus.Metric) {
	sc := k.n.sc
	for i, sp := range sc.Pods {
		p := k.n.pod(i)
		k.pod(ch, sp.Namespace, sp.Name, p.UID, sp.Container, sc.Node, p.Phase, sp.Owner, sp.Resource, len(sp.Devices))
	}
	t, _ := k.n.now()
	for _, u := range sc.Unscheduled {
		if t < u.From || t >= u.To {
			continue
		}
		k.pod(ch, u.Namespace, u.Name, PodUID(sc.Node, u.Namespace, u.Name), u.Container, "", "Pending", u.Owner, u.Resource, u.GPUs)
	}
}

func (kubeState) pod(ch chan<- prometheus.Metric, namespace, name, uid, container, node, phase string, owner Owner, resource string, gpus int) {
	kind, ownerName := owner.Kind, owner.Name
	if kind == "" {
		kind, ownerName = "<none>", "<none>"
	}
	ch <- prometheus.MustNewConstMetric(ksmPodInfo, prometheus.GaugeValue, 1,
		namespace, name, uid, "", "", node, kind, ownerName, "", "false")
	for _, ph := range ksmPhases {
		v := 0.0
		if ph == phase {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(ksmPodPhase, prometheus.GaugeValue, v, namespace, name, uid, ph)
	}
	ch <- prometheus.MustNewConstMetric(ksmPodRequests, prometheus.GaugeValue, float64(gpus),
		namespace, name, uid, container, node, ksmUnsafe.ReplaceAllString(resource, "_"), "integer")
}
