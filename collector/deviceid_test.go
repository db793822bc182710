package collector_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuxray/gpuxray/collector"
)

const (
	testGPU = "GPU-3b9f1e2a-7c4d-4e8f-9a1b-2c3d4e5f6a7b"
	testMIG = "MIG-8f6c2d1e-4b3a-5c6d-7e8f-9a0b1c2d3e4f"
)

func TestParseDeviceID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		id   string
		want collector.DeviceRef // ID is filled in from id
	}{
		{testGPU, collector.DeviceRef{Kind: collector.RefUUID, UUID: testGPU}},
		{"GPU-ABCDEF01", collector.DeviceRef{Kind: collector.RefUUID, UUID: "GPU-ABCDEF01"}},
		{testGPU + "::0", collector.DeviceRef{Kind: collector.RefUUID, UUID: testGPU, Replicated: true}},
		{testGPU + "::17", collector.DeviceRef{Kind: collector.RefUUID, UUID: testGPU, Replicated: true, Replica: 17}},
		{testMIG, collector.DeviceRef{Kind: collector.RefUUID, UUID: testMIG}},
		{testMIG + "::3", collector.DeviceRef{Kind: collector.RefUUID, UUID: testMIG, Replicated: true, Replica: 3}},
		{"MIG-" + testGPU + "/7/0", collector.DeviceRef{Kind: collector.RefLegacyMIG, UUID: testGPU, HasGI: true, GI: 7, CI: 0}},
		{"MIG-" + testGPU + "/1/2::4", collector.DeviceRef{Kind: collector.RefLegacyMIG, UUID: testGPU, HasGI: true, GI: 1, CI: 2, Replicated: true, Replica: 4}},
		{"nvidia0", collector.DeviceRef{Kind: collector.RefMinor, Minor: 0}},
		{"nvidia7", collector.DeviceRef{Kind: collector.RefMinor, Minor: 7}},
		{"nvidia12::2", collector.DeviceRef{Kind: collector.RefMinor, Minor: 12, Replicated: true, Replica: 2}},
		{"nvidia3/gi5", collector.DeviceRef{Kind: collector.RefMinor, Minor: 3, HasGI: true, GI: 5}},
		{"nvidia3/gi5::1", collector.DeviceRef{Kind: collector.RefMinor, Minor: 3, HasGI: true, GI: 5, Replicated: true, Replica: 1}},
		// GKE's time-sharing and MPS shares (gpusharing.go).
		{"nvidia0/vgpu0", collector.DeviceRef{Kind: collector.RefMinor, Minor: 0, Replicated: true, Replica: 0}},
		{"nvidia2/vgpu14", collector.DeviceRef{Kind: collector.RefMinor, Minor: 2, Replicated: true, Replica: 14}},
		{"nvidia1/gi3/vgpu2", collector.DeviceRef{Kind: collector.RefMinor, Minor: 1, HasGI: true, GI: 3, Replicated: true, Replica: 2}},
		// HAMi's vGPU slices (rm/devices.go: "%v-%v" of the UUID and slice).
		{testGPU + "-0", collector.DeviceRef{Kind: collector.RefUUID, UUID: testGPU, HAMi: true, Replicated: true, Replica: 0}},
		{testGPU + "-9", collector.DeviceRef{Kind: collector.RefUUID, UUID: testGPU, HAMi: true, Replicated: true, Replica: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			got, err := collector.ParseDeviceID(tt.id)
			if err != nil {
				t.Fatalf("ParseDeviceID(%q) = %v", tt.id, err)
			}
			tt.want.ID = tt.id
			if got != tt.want {
				t.Errorf("ParseDeviceID(%q)\n got %+v\nwant %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestParseDeviceIDMalformed(t *testing.T) {
	t.Parallel()
	for _, id := range []string{
		"",
		"GPU-",
		"GPU-xyz",
		"GPU-1234567",                      // fewer than 8 hex digits
		"GPU-12345678_9",                   // not hex or dash
		testGPU + "::x",                    // replica not a number
		testGPU + "::",                     // empty replica
		testGPU + "::-1",                   // negative replica
		testGPU + "::+1",                   // signed replica
		testGPU + "::1::2",                 // two replica suffixes
		"::3",                              // replica of nothing
		"MIG-",                             // no UUID
		"MIG-GPU-",                         // legacy form without a UUID
		"MIG-" + testGPU,                   // legacy form without instances
		"MIG-" + testGPU + "/a/0",          // GPU instance not a number
		"MIG-" + testGPU + "/1",            // no compute instance
		"MIG-" + testGPU + "/1/2/3",        // one instance too many
		"MIG-" + testGPU + "/-0/1",         // signed GPU instance
		"MIG-GPU-xyz/1/2",                  // parent not a UUID
		"nvidia",                           // no index
		"nvidiaX",                          // index not a number
		"nvidia-0",                         // signed index
		"nvidia+1",                         // signed index
		"nvidia0/gix",                      // GPU instance not a number
		"nvidia0/gi",                       // empty GPU instance
		"nvidia0/gi1/gi2",                  // two GPU instances
		"nvidia0/ci1",                      // unknown suffix
		"nvidia0/vgpu",                     // empty share
		"nvidia0/vgpux",                    // share not a number
		"nvidia0/vgpu1/gi2",                // share before the GPU instance
		"nvidia0/vgpu1/vgpu2",              // two shares
		"nvidia0/vgpu1::2",                 // a share and a replica
		"nvidia0/gi1/vgpu2/x",              // one part too many
		"gpu-" + testGPU[4:],               // prefixes are case-sensitive
		"amd.com/gpu",                      // unknown form
		"  " + testGPU,                     // leading space
		testGPU + "\n",                     // trailing newline
		"nvidia99999999999999999999999999", // index overflows int
	} {
		t.Run(fmt.Sprintf("%q", id), func(t *testing.T) {
			t.Parallel()
			ref, err := collector.ParseDeviceID(id)
			if !errors.Is(err, collector.ErrDeviceID) {
				t.Fatalf("ParseDeviceID(%q) = %+v, %v; want an error wrapping ErrDeviceID", id, ref, err)
			}
			if ref.ID != id {
				t.Errorf("ParseDeviceID(%q).ID = %q; the ID must be kept for logging", id, ref.ID)
			}
		})
	}
}

// deviceIDGrammar is the grammar ParseDeviceID accepts, written independently
// of the parser so the fuzzer can compare the two.
var deviceIDGrammar = regexp.MustCompile(`^(` +
	`(GPU|MIG)-[0-9a-fA-F-]+` +
	`|MIG-GPU-[0-9a-fA-F-]+/[0-9]+/[0-9]+` +
	`|nvidia[0-9]+(/gi[0-9]+)?(/vgpu[0-9]+)?` +
	`)(::[0-9]+)?$`)

// formatDeviceID writes ref back in its canonical form.
func formatDeviceID(ref collector.DeviceRef) string {
	var s string
	switch ref.Kind {
	case collector.RefUUID:
		s = ref.UUID
		if ref.HAMi {
			return fmt.Sprintf("%s-%d", s, ref.Replica)
		}
	case collector.RefLegacyMIG:
		s = fmt.Sprintf("MIG-%s/%d/%d", ref.UUID, ref.GI, ref.CI)
	case collector.RefMinor:
		s = fmt.Sprintf("nvidia%d", ref.Minor)
		if ref.HasGI {
			s += fmt.Sprintf("/gi%d", ref.GI)
		}
		if ref.Replicated && strings.Contains(ref.ID, "/vgpu") {
			return s + fmt.Sprintf("/vgpu%d", ref.Replica)
		}
	}
	if ref.Replicated {
		s += fmt.Sprintf("::%d", ref.Replica)
	}
	return s
}

func FuzzParseDeviceID(f *testing.F) {
	for _, seed := range []string{
		"", testGPU, testGPU + "::3", testMIG, "MIG-" + testGPU + "/1/2", "nvidia0",
		"nvidia1/gi2::3", "nvidia1/gi2/vgpu3", "nvidia0/vgpu1", testGPU + "-4", "nvidia-0", testGPU + "::+1", "MIG-GPU-/a/0", "nvidia007",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, id string) {
		ref, err := collector.ParseDeviceID(id)
		if ref.ID != id {
			t.Fatalf("ParseDeviceID(%q).ID = %q", id, ref.ID)
		}
		if err != nil {
			if !errors.Is(err, collector.ErrDeviceID) {
				t.Fatalf("ParseDeviceID(%q) error %v does not wrap ErrDeviceID", id, err)
			}
			return
		}
		if !deviceIDGrammar.MatchString(id) {
			t.Fatalf("ParseDeviceID(%q) accepted an ID outside the grammar: %+v", id, ref)
		}
		// Numbers may carry leading zeros, so compare the canonical form's
		// parse with the original's rather than the strings.
		canon := formatDeviceID(ref)
		again, err := collector.ParseDeviceID(canon)
		if err != nil {
			t.Fatalf("ParseDeviceID(%q) = %+v, but its canonical form %q fails: %v", id, ref, canon, err)
		}
		again.ID = id
		if again != ref {
			t.Fatalf("ParseDeviceID(%q) = %+v, but its canonical form %q parses as %+v", id, ref, canon, again)
		}
	})
}
