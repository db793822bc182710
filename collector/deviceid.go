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
	// RefIndex names the device by its GPU index, as GKE's device plugin does
	// ("nvidia<N>", or "nvidia<N>/gi<M>" for a MIG instance).
	RefIndex
	// RefDRA names a device allocated through Dynamic Resource Allocation by
	// its driver, pool and device name (Allocation.DRA), which the node's
	// ResourceSlices map to a UUID; ID is "<driver>/<pool>/<device>".
	RefDRA
)

// DeviceRef is a parsed kubelet device ID.
type DeviceRef struct {
	// ID is the device ID exactly as the kubelet listed it.
	ID   string
	Kind RefKind
	// UUID is set for RefUUID (the device's UUID) and RefLegacyMIG (the
	// parent GPU's UUID).
	UUID string
	// GPU is the GPU index, for RefIndex.
	GPU int
	// HasGI is true when GI names a GPU instance (RefLegacyMIG, and RefIndex
	// with a "/gi<M>" suffix); CI is set for RefLegacyMIG.
	HasGI bool
	GI    int
	CI    int
	// Replica is the time-slicing/MPS replica number of a "…::<n>" ID, and
	// Replicated says the suffix was present: the GPU is shared.
	Replicated bool
	Replica    int
}

// ErrDeviceID is returned, wrapped, for a device ID that names no device form
// gpuxray knows.
var ErrDeviceID = errors.New("malformed device ID")

// ParseDeviceID parses a device ID from the kubelet's pod-resources answer.
// It accepts the forms the NVIDIA and GKE device plugins use:
// "GPU-<uuid>", "MIG-<uuid>", "MIG-GPU-<uuid>/<gi>/<ci>", "nvidia<N>",
// "nvidia<N>/gi<M>", each optionally followed by "::<replica>".
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
	case strings.HasPrefix(base, "GPU-") || strings.HasPrefix(base, "MIG-"):
		if !validUUID(base, base[:4]) {
			return ref, fmt.Errorf("%w %q: not a UUID", ErrDeviceID, id)
		}
		ref.Kind, ref.UUID = RefUUID, base
	case strings.HasPrefix(base, "nvidia"):
		rest := strings.TrimPrefix(base, "nvidia")
		idx, gi, hasGI := rest, "", false
		if i := strings.Index(rest, "/gi"); i >= 0 {
			idx, gi, hasGI = rest[:i], rest[i+3:], true
		}
		n, err := atoiDigits(idx)
		if err != nil {
			return ref, fmt.Errorf("%w %q: want nvidia<N> or nvidia<N>/gi<M>", ErrDeviceID, id)
		}
		ref.Kind, ref.GPU = RefIndex, n
		if hasGI {
			m, err := atoiDigits(gi)
			if err != nil {
				return ref, fmt.Errorf("%w %q: want nvidia<N>/gi<M>", ErrDeviceID, id)
			}
			ref.HasGI, ref.GI = true, m
		}
	default:
		return ref, fmt.Errorf("%w %q: unknown form", ErrDeviceID, id)
	}
	return ref, nil
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
