package sim

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDRAScenarioTruth checks Truth for the four DRA scenarios under
// test/scenarios against the figures computed by hand in their headers:
// DRA pods count exactly as device-plugin pods, a shared claim's pods as
// time-sliced pods (each its own ratio), and a dynamic MIG device over its
// claim's life, with the UUID made for it.
func TestDRAScenarioTruth(t *testing.T) {
	t.Parallel()
	type want struct {
		pod, device, claim, draDevice string
		alloc, idle, active           float64
	}
	tests := []struct {
		file string
		want []want
		// same and other are pairs of rows on one device, and on two.
		same, other [][2]int
	}{
		{"dra-whole.yaml", []want{
			{"train-0", "gpu:0", "train-0", "gpu-0", 3600, 1200, 0.9 * 2400},
			{"train-0", "gpu:1", "train-0", "gpu-1", 3600, 1200, 0.9 * 2400},
			{"llm-0", "gpu:2", "llm-0", "gpu-2", 2400, 1200, 0.5*1200 + 0.02*1200},
		}, nil, [][2]int{{0, 1}, {1, 2}}},
		{"dra-shared.yaml", []want{
			{"notebook-a", "gpu:0", "shared-gpu", "gpu-0", 3600, 2400, 0.6 * 1200},
			{"notebook-b", "gpu:0", "shared-gpu", "gpu-0", 1800, 0, 0.3 * 1800},
			{"batch", "gpu:1", "batch", "gpu-1", 1800, 0, 1800},
		}, [][2]int{{0, 1}}, [][2]int{{1, 2}}},
		{"dra-mig.yaml", []want{
			{"finetune-0", "mig:0:3g.40gb", "finetune-0", "gpu-0-mig-3g40gb-9-0", 2400, 1200, 0.9 * 1200},
			{"embed-0", "mig:0:1g.10gb", "embed-0", "gpu-0-mig-1g10gb-19-4", 1800, 1200, 0.7*600 + 0.02*1200},
			{"embed-1", "mig:0:1g.10gb", "embed-1", "gpu-0-mig-1g10gb-19-0", 1200, 0, 0.5 * 1200},
			{"eval-0", "gpu:1", "eval-0", "gpu-1", 3600, 600, 0.95 * 3000},
			// embed-1's 1g.10gb is a device of its own, not embed-0's made again.
		}, nil, [][2]int{{0, 1}, {1, 2}, {0, 2}}},
		// Minor numbers [2, 0, 1]: device names say the minor, not the index.
		{"dra-mig-nvidia.yaml", []want{
			{"train-mig", "mig:0:3g.40gb", "train-mig", "gpu-2-mig-3g40gb-9-0", 3600, 1800, 0.9 * 1800},
			{"embed-a", "mig:0:1g.10gb", "embed-a", "gpu-2-mig-1g10gb-19-4", 3600, 0, 0.6 * 3600},
			{"embed-b", "mig:0:1g.10gb", "embed-b", "gpu-2-mig-1g10gb-19-5", 1800, 900, 0.2*900 + 0.01*900},
			{"embed-c", "mig:0:1g.10gb", "embed-c", "gpu-2-mig-1g10gb-19-5", 900, 0, 0.5 * 900},
			{"train-whole", "gpu:1", "train-whole", "gpu-0", 3000, 1200, 0.8 * 1800},
			{"eval", "gpu:2", "eval", "gpu-1", 3600, 0, 0.95 * 3600},
			// embed-c's 1g.10gb at slice 5 is a device of its own, not embed-b's.
		}, nil, [][2]int{{1, 2}, {2, 3}, {1, 3}}},
		{"dra-mixed.yaml", []want{
			{"train-dp", "gpu:0", "", "", 3600, 0, 0.8 * 3600},
			{"train-dra", "gpu:1", "train-dra", "gpu-1", 3600, 1800, 0.4 * 1800},
			{"slice-0", "gpu:2::0", "", "", 3600, 0, 0.3 * 3600},
			{"slice-1", "gpu:2::1", "", "", 1800, 1800, 0},
			{"notebook", "gpu:3", "nb", "gpu-3", 1800, 1800, 0.02 * 1800},
		}, [][2]int{{2, 3}}, [][2]int{{0, 1}, {3, 4}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			s, err := LoadScenario(filepath.Join("..", "..", "test", "scenarios", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			rows := s.Truth(0.05)
			if len(rows) != len(tt.want) {
				t.Fatalf("%d rows, want %d: %+v", len(rows), len(tt.want), rows)
			}
			for i, w := range tt.want {
				r := rows[i]
				if r.Pod != w.pod || r.Device.String() != w.device || r.Claim != w.claim || r.DRADevice != w.draDevice ||
					!near(r.AllocatedSeconds, w.alloc, 1e-9) || !near(r.IdleSeconds, w.idle, 1e-9) || !near(r.ActiveSeconds, w.active, 1e-9) {
					t.Errorf("row %d\n got %+v\nwant %+v", i, r, w)
				}
				prefix := "GPU-"
				if r.Device.MIG {
					prefix = "MIG-"
				}
				if !strings.HasPrefix(r.UUID, prefix) {
					t.Errorf("row %d (%s) UUID %q, want %s…", i, r.Pod, r.UUID, prefix)
				}
			}
			for _, p := range tt.same {
				if rows[p[0]].UUID != rows[p[1]].UUID {
					t.Errorf("rows %d and %d: UUIDs %s and %s, want one device", p[0], p[1], rows[p[0]].UUID, rows[p[1]].UUID)
				}
			}
			for _, p := range tt.other {
				if rows[p[0]].UUID == rows[p[1]].UUID {
					t.Errorf("rows %d and %d: both UUID %s, want two devices", p[0], p[1], rows[p[0]].UUID)
				}
			}
		})
	}
}
