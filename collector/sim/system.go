package sim

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// reservedMemory is the framebuffer the simulated driver keeps for itself
// (Memory_v2.Reserved); real drivers reserve a few hundred MiB.
const reservedMemory = 500 << 20

// system is what the simulation knows of one DGX model: go-nvml's mock of it
// and the power envelope of its GPU.
type system struct {
	gpu       gpus.Config
	newServer func() *server.Server
	// idleWatts and maxWatts bound the power a GPU draws at 0 and 100% busy.
	idleWatts float64
	maxWatts  float64
	// gpm tells whether the GPU has GPU Performance Monitoring (Hopper and newer).
	gpm bool
}

func (s system) memTotal() uint64 { return s.gpu.MemoryMB << 20 }

// systems is a read-only table, by scenario `system` name. The GPU configs
// are the ones the go-nvml mock servers are built from.
var systems = map[string]system{
	"dgxa100": {gpu: realName(gpus.A100_SXM4_40GB), newServer: dgxa100.New, idleWatts: 50, maxWatts: 400},
	"dgxh100": {gpu: realName(gpus.H100_SXM5_80GB), newServer: dgxh100.New, idleWatts: 70, maxWatts: 700, gpm: true},
	"dgxh200": {gpu: realName(gpus.H200_SXM5_141GB), newServer: dgxh200.New, idleWatts: 75, maxWatts: 700, gpm: true},
	"dgxb200": {gpu: realName(gpus.B200_SXM5_180GB), newServer: dgxb200.New, idleWatts: 120, maxWatts: 1000, gpm: true},
}

// realName is a mock GPU with the name of the product it stands for:
// go-nvml's A100 mock calls itself "Mock NVIDIA A100-SXM4-40GB", which no
// driver does and no GPU Feature Discovery label matches (issue #28: a
// simulated GPU's product is its NVML name, a real product's).
func realName(c gpus.Config) gpus.Config {
	c.Name = strings.TrimPrefix(c.Name, "Mock ")
	return c
}

// ProductName is the NVML name of the GPUs of a scenario system ("" for
// an unknown one): what GetName answers and gpuxray_device_info's name.
func ProductName(system string) string { return systems[system].gpu.Name }
