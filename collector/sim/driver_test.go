package sim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// recorded lists, by method, the calls go-nvml's mock has recorded on m (a
// *server.Server or *server.Device): every XxxCalls method it has.
func recorded(m any) map[string]int {
	out := map[string]int{}
	v := reflect.ValueOf(m)
	for i := 0; i < v.NumMethod(); i++ {
		name := v.Type().Method(i).Name
		meth := v.Method(i)
		if !strings.HasSuffix(name, "Calls") || meth.Type().NumIn() != 0 || meth.Type().NumOut() != 1 {
			continue
		}
		if c := meth.Call(nil)[0].Len(); c > 0 {
			out[strings.TrimSuffix(name, "Calls")] = c
		}
	}
	return out
}

// TestDriverRecordsNoCalls polls the simulated driver as the agent does, for
// 1,000 seconds, and checks that go-nvml's mock recorded none of the calls:
// its call lists are never cleared, so every recorded call of a long-running
// simulation would be memory that is never freed.
func TestDriverRecordsNoCalls(t *testing.T) {
	t.Parallel()
	sc := Demo()
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	lib := n.NVML()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		t.Fatalf("Init = %v", ret)
	}
	lib.SystemGetDriverVersion()
	lib.SystemGetNVMLVersion()
	lib.SystemGetCudaDriverVersion()
	lib.Extensions().LookupSymbol("nvmlGpmSampleGet")
	count, _ := lib.DeviceGetCount()
	devs := make([]nvml.Device, count)
	for g := range devs {
		devs[g], _ = lib.DeviceGetHandleByIndex(g)
		d := devs[g]
		if h, _ := lib.DeviceGetHandleByUUID(n.DeviceUUID(g)); h != d {
			t.Errorf("gpu:%d handle by UUID differs from handle by index", g)
		}
		if h, _ := lib.DeviceGetHandleByPciBusId(n.srv.Devices[g].(*server.Device).PciBusID); h != d {
			t.Errorf("gpu:%d handle by PCI bus ID differs from handle by index", g)
		}
		d.GetUUID()
		d.GetName()
		d.GetIndex()
		d.GetMinorNumber()
		d.GetBrand()
		d.GetArchitecture()
		d.GetCudaComputeCapability()
		d.GetPciInfo()
		d.GetMigMode()
		lib.DeviceGetUUID(d)
		lib.DeviceGetName(d)
		lib.DeviceGetIndex(d)
		lib.DeviceGetMinorNumber(d)
		lib.DeviceGetBrand(d)
		lib.DeviceGetArchitecture(d)
		lib.DeviceGetCudaComputeCapability(d)
		lib.DeviceGetPciInfo(d)
		lib.DeviceGetMigMode(d)
	}
	lastSeen := make([]uint64, count)
	for range 1000 {
		clock.Advance(time.Second)
		for g, d := range devs {
			if _, s, ret := d.GetSamples(nvml.GPU_UTILIZATION_SAMPLES, lastSeen[g]); ret == nvml.SUCCESS {
				lastSeen[g] = s[len(s)-1].TimeStamp
			}
			d.GetMemoryInfo_v2()
			d.GetMemoryInfo()
			d.GetPowerUsage()
			d.GetTotalEnergyConsumption()
			d.GetComputeRunningProcesses()
			d.GetProcessUtilization(lastSeen[g])
			lib.DeviceGetSamples(d, nvml.GPU_UTILIZATION_SAMPLES, lastSeen[g])
			lib.DeviceGetMemoryInfo_v2(d)
			lib.DeviceGetMemoryInfo(d)
			lib.DeviceGetPowerUsage(d)
			lib.DeviceGetTotalEnergyConsumption(d)
			lib.DeviceGetComputeRunningProcesses(d)
			lib.DeviceGetProcessUtilization(d, lastSeen[g])
		}
	}
	if lastSeen[0] == 0 {
		t.Fatal("GPU 0 never answered samples; the poll is not exercising the driver")
	}
	if ret := lib.Shutdown(); ret != nvml.SUCCESS {
		t.Errorf("Shutdown = %v", ret)
	}

	if got := recorded(n.srv); len(got) > 0 {
		t.Errorf("mock server recorded calls: %v", got)
	}
	for g, dev := range n.srv.Devices {
		if got := recorded(dev); len(got) > 0 {
			t.Errorf("mock device %d recorded calls: %v", g, got)
		}
	}
	// The check itself sees a call that does reach the mock.
	raw := n.srv.Devices[0].(*server.Device)
	raw.GetUUID()
	if got := recorded(raw); got["GetUUID"] != 1 || len(got) != 1 {
		t.Errorf("after one call to the mock's GetUUID, recorded = %v", got)
	}
}
