package sim

import (
	"crypto/sha256"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// How a simulated pod gets its GPUs: the scenario's and pods' `allocation`.
const (
	// AllocationDevicePlugin is the NVIDIA device plugin: the kubelet lists
	// devices by ID under an extended resource.
	AllocationDevicePlugin = "device-plugin"
	// AllocationDRA is Dynamic Resource Allocation: the kubelet lists the
	// pod's claims, each device as (driver, pool, device), and the node's
	// ResourceSlices say which GPU or MIG device that is.
	AllocationDRA = "dra"
)

// DRADriver is the name of NVIDIA's DRA driver for GPUs, which publishes the
// simulated ResourceSlices and prepares the simulated claims.
const DRADriver = "gpu.nvidia.com"

// claimNameRE is a Kubernetes object name: a lower-case RFC 1123 subdomain.
var claimNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// allocation checks an allocation key.
func (d *validator) allocation(field, v string) (string, error) {
	if v != AllocationDevicePlugin && v != AllocationDRA {
		return "", d.errf(field, "%q is not an allocation; want %s or %s", v, AllocationDevicePlugin, AllocationDRA)
	}
	return v, nil
}

// draPod checks a pod's allocation and claim keys, before its devices.
func (d *validator) draPod(p string, ps *PodSpec, pod *Pod, s *Scenario) error {
	pod.Allocation = s.Allocation
	if d.has(p + ".allocation") {
		v, err := d.allocation(p+".allocation", ps.Allocation)
		if err != nil {
			return err
		}
		pod.Allocation = v
	}
	claim := d.has(p + ".claim")
	if pod.Allocation != AllocationDRA {
		if claim {
			return d.errf(p+".claim", "a claim is DRA's, but the pod's devices come from the device plugin; give it allocation: %s", AllocationDRA)
		}
		return nil
	}
	if d.has(p + ".resource") {
		return d.errf(p+".resource", "an extended resource is the device plugin's; a DRA pod's devices come through its claim")
	}
	pod.Resource, pod.Claim = "", pod.Name
	if claim {
		v := ps.Claim
		if len(v) > 253 || !claimNameRE.MatchString(v) {
			return d.errf(p+".claim", "%q is not a claim name: lower-case letters, digits, '-' and '.'", v)
		}
		pod.Claim = v
	}
	return nil
}

// draDevice checks one device of a pod against its allocation.
func (d *validator) draDevice(field string, pod *Pod, spec DeviceSpec) error {
	switch {
	case pod.Allocation == AllocationDRA && spec.Replicated:
		return d.errf(field, "%s: DRA gives a GPU to one claim; pods share it by naming the same claim", spec)
	case pod.Allocation != AllocationDRA && spec.Dynamic:
		return d.errf(field, "%s: dynamic MIG devices are made by the DRA driver; give the pod allocation: %s", spec, AllocationDRA)
	}
	return nil
}

// claimGroup is one ResourceClaim and the pods that name it, in file order.
type claimGroup struct {
	namespace, name string
	pods            []int
}

// claims groups the DRA pods by claim, in the order of their first pod.
func (s *Scenario) claims() []claimGroup {
	var out []claimGroup
	at := map[string]int{}
	for i, p := range s.Pods {
		if p.Allocation != AllocationDRA {
			continue
		}
		key := p.Namespace + "/" + p.Claim
		if j, ok := at[key]; ok {
			out[j].pods = append(out[j].pods, i)
			continue
		}
		at[key] = len(out)
		out = append(out, claimGroup{namespace: p.Namespace, name: p.Claim, pods: []int{i}})
	}
	return out
}

// sameClaim reports whether pods a and b name one claim.
func (s *Scenario) sameClaim(a, b int) bool {
	pa, pb := s.Pods[a], s.Pods[b]
	return pa.Allocation == AllocationDRA && pb.Allocation == AllocationDRA && pa.Namespace == pb.Namespace && pa.Claim == pb.Claim
}

// UsesDRA reports whether NVIDIA's DRA driver runs on the node: the node's
// allocation is dra, or a pod's is. Its ResourceSlices are then served.
func (s *Scenario) UsesDRA() bool {
	if s.Allocation == AllocationDRA {
		return true
	}
	for _, p := range s.Pods {
		if p.Allocation == AllocationDRA {
			return true
		}
	}
	return false
}

// DRAGPU reports whether the DRA driver publishes GPU gpu in the node's
// ResourceSlices: it runs on the node and no device-plugin pod holds the
// GPU (a GPU belongs to one of them).
func (s *Scenario) DRAGPU(gpu int) bool {
	if !s.UsesDRA() {
		return false
	}
	for _, p := range s.Pods {
		if p.Allocation != AllocationDRA && holds(p, gpu) {
			return false
		}
	}
	return true
}

// draCheck validates what spans DRA pods: a shared claim's pods name the
// same devices, the device plugin and the DRA driver do not share a GPU,
// dynamic MIG has the driver, and the driver can name every MIG device.
func (d *validator) draCheck(_ *ScenarioSpec, s *Scenario) error {
	for _, c := range s.claims() {
		// Pods that use one request of a claim share its devices; each
		// request has devices of its own.
		first := map[string]int{}
		for _, i := range c.pods {
			req := s.Pods[i].request()
			j, ok := first[req]
			if !ok {
				first[req] = i
				continue
			}
			want := deviceNames(s.Pods[j].Devices)
			if got := deviceNames(s.Pods[i].Devices); !slices.Equal(got, want) {
				if s.Pods[i].Request == "" {
					return d.errf(fmt.Sprintf("pods[%d].devices", i),
						"[%s] differs from the [%s] of claim %s/%s that pods[%d] holds; pods naming one claim share its devices",
						strings.Join(got, ", "), strings.Join(want, ", "), c.namespace, c.name, j)
				}
				return d.errf(fmt.Sprintf("pods[%d].devices", i),
					"[%s] differs from the [%s] of claim %s/%s's request %s that pods[%d] holds; pods using one request share its devices",
					strings.Join(got, ", "), strings.Join(want, ", "), c.namespace, c.name, req, j)
			}
		}
	}
	owner := map[int]int{} // GPU → first pod holding it
	for j, b := range s.Pods {
		for k, db := range b.Devices {
			i, ok := owner[db.GPU]
			if !ok {
				owner[db.GPU] = j
				continue
			}
			a := s.Pods[i]
			if (a.Allocation == AllocationDRA) == (b.Allocation == AllocationDRA) {
				continue
			}
			by := "the device plugin"
			if a.Allocation == AllocationDRA {
				by = "DRA"
			}
			return d.errf(fmt.Sprintf("pods[%d].devices[%d]", j, k),
				"gpu:%d is also handed out by %s, to %s/%s (pods[%d]); the device plugin and the DRA driver do not share a GPU",
				db.GPU, by, a.Namespace, a.Name, i)
		}
	}
	sys := systems[s.System]
	for gpu, layout := range s.MIG {
		f := fmt.Sprintf("mig.gpu:%d", gpu)
		switch {
		case s.MIGDynamic[gpu] && !s.UsesDRA():
			return d.errf(f, "dynamic MIG devices are made by the DRA driver; set allocation: %s, on the node or on a pod", AllocationDRA)
		case !s.MIGDynamic[gpu] && s.DRAGPU(gpu):
			if _, ok := sys.staticPlacements(layout); !ok {
				return d.errf(f, "%s fits by counts, but no placement on the GPU's memory slices holds it, so the DRA driver cannot name its devices", fmtLayout(layout))
			}
		}
	}
	return nil
}

func deviceNames(devs []DeviceSpec) []string {
	out := make([]string, len(devs))
	for i, d := range devs {
		out[i] = d.String()
	}
	slices.Sort(out)
	return out
}

// planCheck places the dynamic MIG devices, refusing one that does not fit.
func (d *validator) planCheck(_ *ScenarioSpec, s *Scenario) error {
	if _, pe := s.migPlan(); pe != nil {
		return d.errf(fmt.Sprintf("pods[%d].devices[%d]", pe.pod, pe.dev), "%s", pe.msg)
	}
	return nil
}

// ClaimUID is the simulated UID of ResourceClaim namespace/name on node, a
// name-based UUID as PodUID.
func ClaimUID(node, namespace, name string) string {
	h := sha256.Sum256(fmt.Appendf(nil, "gpuxray-sim/%s/resourceclaim/%s/%s", node, namespace, name))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// GPUDeviceName is the name NVIDIA's DRA driver gives the GPU with minor
// number minor in its ResourceSlices: gpu-<minor> (deviceinfo.go
// CanonicalName); a simulated GPU's minor number is its index unless the
// scenario's minor_numbers say otherwise.
func GPUDeviceName(minor int) string { return fmt.Sprintf("gpu-%d", minor) }

// VFIODeviceName is the name NVIDIA's DRA driver gives the n-th of the
// node's NVIDIA PCI devices when it is passed through to VMs:
// gpu-vfio-<n> (deviceinfo.go VfioDeviceInfo CanonicalName).
func VFIODeviceName(n int) string { return fmt.Sprintf("gpu-vfio-%d", n) }

// deviceIdentity is what each pod's devices are, per pod and device: the
// DRA device name ("" for a device-plugin pod) and the NVML UUID.
type deviceIdentity struct {
	draName [][]string
	uuid    [][]string
}

// identities names every pod's devices, with plan the scenario's migPlan.
func (s *Scenario) identities(plan []migHolding) deviceIdentity {
	sys := systems[s.System]
	held := map[[2]int]*migHolding{}
	for i := range plan {
		for _, p := range plan[i].pods {
			held[[2]int{p, plan[i].dev}] = &plan[i]
		}
	}
	starts := map[int][]int{}
	for gpu, layout := range s.MIG {
		starts[gpu], _ = sys.staticPlacements(layout)
	}
	id := deviceIdentity{draName: make([][]string, len(s.Pods)), uuid: make([][]string, len(s.Pods))}
	for i, p := range s.Pods {
		id.draName[i], id.uuid[i] = make([]string, len(p.Devices)), make([]string, len(p.Devices))
		for k, d := range p.Devices {
			name, uuid := GPUDeviceName(s.minor(d.GPU)), deviceUUID(s.Node, d.GPU)
			switch {
			case s.VFIO[d.GPU]:
				// NVML does not see it: no UUID to join on.
				name, uuid = VFIODeviceName(d.GPU), ""
			case d.Dynamic:
				if h := held[[2]int{i, k}]; h != nil {
					name, uuid = h.profile.draName(s.minor(d.GPU), h.start), h.uuid
				}
			case d.MIG:
				prof, _ := sys.migProfile(s.MIG[d.GPU][d.MIGSlot])
				name, uuid = prof.draName(s.minor(d.GPU), starts[d.GPU][d.MIGSlot]), migUUID(s.Node, d.GPU, d.MIGSlot)
			}
			if p.Allocation == AllocationDRA {
				id.draName[i][k] = name
			}
			id.uuid[i][k] = uuid
		}
	}
	return id
}
