package collector

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// RefKind says how a kubelet device ID names its device.
type RefKind int

const (
	// RefUUID names the device by its NVML UUID ("GPU-…" or "MIG-…").
	RefUUID RefKind = iota + 1
	// RefLegacyMIG names a MIG instance by parent UUID and GPU/compute
	// instance IDs ("MIG-GPU-<uuid>/<gi>/<ci>", drivers before R470).
	RefLegacyMIG
	// RefMinor names the device by its GPU's minor number, as GKE's device
	// plugin does: "nvidia<N>" (/dev/nvidia<N>), "nvidia<N>/gi<G>" for GPU
	// instance G of a MIG GPU, each with "/vgpu<R>" for share R of a
	// time-sharing or MPS GPU (GoogleCloudPlatform/container-engine-
	// accelerators, pkg/gpu/nvidia/manager.go and gpusharing/gpusharing.go).
	// The minor number is not the NVML index (GKE reads it with
	// nvmlDeviceGetMinorNumber).
	RefMinor
	// RefDRA names a device allocated through Dynamic Resource Allocation by
	// its driver, pool and device name (Allocation.DRA), which the node's
	// ResourceSlices map to a UUID; ID is "<driver>/<pool>/<device>".
	RefDRA
	// RefMIGPlacement names a MIG instance by its parent GPU's UUID (UUID),
	// its GPU instance profile ID (GIProfile) and the first memory slice of
	// its placement (Placement), as NVIDIA's DRA driver names a dynamic MIG
	// device that its ResourceSlices give no uuid: the MIG instance NVML
	// lists with that profile and placement on that parent is the device.
	RefMIGPlacement
)

// DeviceRef is a parsed kubelet device ID.
type DeviceRef struct {
	// ID is the device ID exactly as the kubelet listed it.
	ID   string
	Kind RefKind
	// UUID is set for RefUUID (the device's UUID), and for RefLegacyMIG
	// and RefMIGPlacement (the parent GPU's UUID).
	UUID string
	// Minor is the GPU's minor number, for RefMinor.
	Minor int
	// HasGI is true when GI names a GPU instance (RefLegacyMIG, and RefMinor
	// with a "/gi<G>" part); CI is set for RefLegacyMIG.
	HasGI bool
	GI    int
	CI    int
	// GIProfile and Placement are a RefMIGPlacement's GPU instance profile
	// ID and placement start.
	GIProfile int
	Placement int
	// Profile is a RefMIGPlacement's profile name ("1g.10gb"): where NVML
	// does not say a MIG instance's placement (GetGpuInstanceById needs a
	// privileged user), the one instance of that profile on the parent is
	// the device; with several, none is.
	Profile string
	// Replica is the time-slicing/MPS replica number of a "…::<n>" ID (or
	// the share of a GKE "…/vgpu<n>" or HAMi ID), and Replicated says there
	// was one: the GPU is shared.
	Replicated bool
	Replica    int
	// HAMi marks one of HAMi's vGPU slices, "GPU-<uuid>-<n>": the kubelet's
	// pick among the node's slices, which names the GPU HAMi gave the
	// container only when its device plugin has GetPreferredAllocation on
	// (off by default); the pod's hami.io/vgpu-devices-allocated annotation
	// names the GPU it did give (Pod.SharedDevices).
	HAMi bool
}

// ErrDeviceID is returned, wrapped, for a device ID that names no device form
// gpuxray knows.
var ErrDeviceID = errors.New("malformed device ID")

// ParseDeviceID parses a device ID from the kubelet's pod-resources answer.
// It accepts the forms the NVIDIA, GKE and HAMi device plugins use:
// "GPU-<uuid>", "MIG-<uuid>", "MIG-GPU-<uuid>/<gi>/<ci>", each optionally
// followed by "::<replica>"; GKE's "nvidia<N>", "nvidia<N>/gi<G>", each
// optionally followed by "/vgpu<R>" or "::<replica>"; and HAMi's
// "GPU-<uuid>-<n>".
func ParseDeviceID(id string) (DeviceRef, error) {
	ref := DeviceRef{ID: id}
	base := id
	if i := strings.LastIndex(id, "::"); i >= 0 {
		n, err := atoiDigits(id[i+2:])
		if err != nil {
			return ref, fmt.Errorf("%w %q: replica suffix is not a number", ErrDeviceID, id)
		}
		base, ref.Replicated, ref.Replica = id[:i], true, n
	}
	switch {
	case strings.HasPrefix(base, "MIG-GPU-"):
		parts := strings.Split(strings.TrimPrefix(base, "MIG-"), "/")
		if len(parts) != 3 || !validUUID(parts[0], "GPU-") {
			return ref, fmt.Errorf("%w %q: want MIG-GPU-<uuid>/<gi>/<ci>", ErrDeviceID, id)
		}
		gi, err1 := atoiDigits(parts[1])
		ci, err2 := atoiDigits(parts[2])
		if err1 != nil || err2 != nil {
			return ref, fmt.Errorf("%w %q: GPU and compute instance IDs must be numbers", ErrDeviceID, id)
		}
		ref.Kind, ref.UUID, ref.HasGI, ref.GI, ref.CI = RefLegacyMIG, parts[0], true, gi, ci
	case strings.HasPrefix(base, "GPU-") && !ref.Replicated && hamiSlice(base) > 0:
		i := hamiSlice(base)
		n, _ := atoiDigits(base[i+1:])
		ref.Kind, ref.UUID, ref.HAMi, ref.Replicated, ref.Replica = RefUUID, base[:i], true, true, n
	case strings.HasPrefix(base, "GPU-") || strings.HasPrefix(base, "MIG-"):
		if !validUUID(base, base[:4]) {
			return ref, fmt.Errorf("%w %q: not a UUID", ErrDeviceID, id)
		}
		ref.Kind, ref.UUID = RefUUID, base
	case strings.HasPrefix(base, "nvidia"):
		return parseGKE(ref, strings.TrimPrefix(base, "nvidia"))
	default:
		return ref, fmt.Errorf("%w %q: unknown form", ErrDeviceID, id)
	}
	return ref, nil
}

// parseGKE parses the rest of a GKE device ID after "nvidia": "<N>",
// "<N>/gi<G>", either followed by "/vgpu<R>".
func parseGKE(ref DeviceRef, rest string) (DeviceRef, error) {
	bad := func() (DeviceRef, error) {
		return ref, fmt.Errorf("%w %q: want nvidia<N>, nvidia<N>/gi<G>, or either with /vgpu<R>", ErrDeviceID, ref.ID)
	}
	parts := strings.Split(rest, "/")
	if len(parts) > 3 {
		return bad()
	}
	n, err := atoiDigits(parts[0])
	if err != nil {
		return bad()
	}
	ref.Kind, ref.Minor = RefMinor, n
	for i, p := range parts[1:] {
		switch {
		case i == 0 && strings.HasPrefix(p, "gi"):
			g, err := atoiDigits(p[2:])
			if err != nil {
				return bad()
			}
			ref.HasGI, ref.GI = true, g
		case i == len(parts)-2 && strings.HasPrefix(p, "vgpu") && !ref.Replicated:
			r, err := atoiDigits(p[4:])
			if err != nil {
				return bad()
			}
			ref.Replicated, ref.Replica = true, r
		default:
			return bad()
		}
	}
	return ref, nil
}

// hamiSlice returns the index of the dash before the slice number of
// HAMi's "GPU-<uuid>-<n>", or 0 when s is not of that form: an NVML UUID
// is always 8-4-4-4-12 hex digits (HAMi's physicalDeviceID strips the
// sixth dash-separated group the same way).
func hamiSlice(s string) int {
	groups := strings.Split(strings.TrimPrefix(s, "GPU-"), "-")
	if len(groups) != 6 {
		return 0
	}
	for i, want := range []int{8, 4, 4, 4, 12} {
		if len(groups[i]) != want || strings.TrimLeft(groups[i], "0123456789abcdefABCDEF") != "" {
			return 0
		}
	}
	if _, err := atoiDigits(groups[5]); err != nil {
		return 0
	}
	return len(s) - len(groups[5]) - 1
}

// atoiDigits parses a decimal number written with digits only: strconv.Atoi
// also takes a sign, which would let "nvidia-0" or "GPU-…::+1" through.
func atoiDigits(s string) (int, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	return strconv.Atoi(s)
}

// validUUID reports whether s is prefix followed by hex digits and dashes,
// at least 8 of them hex.
func validUUID(s, prefix string) bool {
	if !strings.HasPrefix(s, prefix) {
		return false
	}
	hex := 0
	for _, c := range s[len(prefix):] {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			hex++
		case c == '-':
		default:
			return false
		}
	}
	return hex >= 8
}
