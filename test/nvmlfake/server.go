// Package nvmlfake is a fake libnvidia-ml.so.1 at the C ABI, for running
// the production gpuxray binary, unmodified, on a simulated node: Build
// compiles libnvml.c with gcc against go-nvml's nvml.h, in a variant that
// has the symbols of a given driver, and Serve answers its calls over a
// unix socket from an nvml.Interface (a collector/sim node's). go-nvml in
// the binary dlopens the fake as it would the driver's library, looks its
// symbols up, and passes it the versioned structs of nvml.h.
package nvmlfake

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The protocol's ops and process lists, as proto.h numbers them.
const (
	opInit                = 1
	opShutdown            = 2
	opDriverVersion       = 3
	opCount               = 4
	opHandleByIndex       = 5
	opHandleByUUID        = 6
	opUUID                = 7
	opName                = 8
	opIndex               = 9
	opMinor               = 10
	opMIGMode             = 11
	opSamples             = 12
	opProcessUtilization  = 13
	opMemory              = 14
	opMemoryV2            = 15
	opPower               = 16
	opEnergy              = 17
	opProcesses           = 18
	opMaxMIG              = 19
	opMIGHandle           = 20
	opGPUInstanceID       = 21
	opComputeInstanceID   = 22
	opAttributes          = 23
	opParent              = 24
	opIsMIG               = 25
	opUtilizationRates    = 26
	opGPMSupport          = 27
	opGPMAlloc            = 28
	opGPMFree             = 29
	opGPMGet              = 30
	opGPMMIGGet           = 31
	opGPMMetrics          = 32
	opNVMLVersion         = 33
	opCUDAVersion         = 34
	listCompute, listGfx  = 0, 1
	listMPS               = 2
	maxHandles            = 4096
	maxRequest            = 1 << 20
	socketEnv             = "GPUXRAY_NVMLFAKE_SOCKET"
	libraryName           = "libnvidia-ml.so.1"
	goNVMLModule          = "github.com/NVIDIA/go-nvml"
	headerDirInGoNVMLRepo = "pkg/nvml"
)

// SocketEnv is the environment variable the fake library reads its
// socket's path from.
const SocketEnv = socketEnv

//go:embed csrc/libnvml.c
var librarySource []byte

//go:embed csrc/proto.h
var protoHeader []byte

// Variants of the library, by the driver whose symbols they have.
const (
	// Current has every symbol gpuxray may call (R550).
	Current = "current"
	// R470 lacks nvmlDeviceGetMemoryInfo_v2 (R510), the _v3 process lists
	// (R510) and GPM (R520).
	R470 = "r470"
	// R535StructBug is 535.43 to 535.86: the _v3 process lists write
	// 32-byte entries into nvmlProcessInfo_t arrays (go-nvml #75).
	R535StructBug = "r535-struct-bug"
)

var variantFlags = map[string][]string{
	Current:       nil,
	R470:          {"-DFAKE_R470"},
	R535StructBug: {"-DFAKE_V3_STRIDE=32"},
}

// Build compiles the variant into dir/libnvidia-ml.so.1 with gcc and
// returns dir, for LD_LIBRARY_PATH.
func Build(dir, variant string) (string, error) {
	flags, ok := variantFlags[variant]
	if !ok {
		return "", fmt.Errorf("nvmlfake: unknown variant %q", variant)
	}
	header, err := headerDir()
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, b := range map[string][]byte{"libnvml.c": librarySource, "proto.h": protoHeader} {
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			return "", err
		}
	}
	args := append([]string{"-std=gnu11", "-Wall", "-Werror", "-Wno-deprecated-declarations", "-O2", "-shared", "-fPIC",
		"-fvisibility=hidden", "-I", header, "-I", src, "-o", filepath.Join(dir, libraryName), filepath.Join(src, "libnvml.c"), "-lpthread"}, flags...)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("nvmlfake: gcc: %w\n%s", err, out)
	}
	return dir, nil
}

// headerDir is go-nvml's nvml.h's folder in the module cache: the header
// go-nvml's cgo code is built against, so the fake's structs are its.
func headerDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", goNVMLModule).Output()
	if err != nil {
		return "", fmt.Errorf("nvmlfake: finding %s: %w", goNVMLModule, err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), headerDirInGoNVMLRepo)
	if _, err := os.Stat(filepath.Join(dir, "nvml.h")); err != nil {
		return "", fmt.Errorf("nvmlfake: %w", err)
	}
	return dir, nil
}

// Server answers the fake library's calls from an nvml.Interface.
type Server struct {
	lib nvml.Interface
	ln  net.Listener
	wg  sync.WaitGroup

	mu      sync.Mutex
	handles []nvml.Device // by ID
	ids     map[nvml.Device]uint32
	samples map[uint32]nvml.GpmSample
	next    uint32
	conns   map[net.Conn]bool
	// Calls counts the calls answered, by op.
	calls map[uint32]int
}

// Serve answers the fake library on a unix socket at path.
func Serve(path string, lib nvml.Interface) (*Server, error) {
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	s := &Server{lib: lib, ln: ln, ids: map[nvml.Device]uint32{}, samples: map[uint32]nvml.GpmSample{}, conns: map[net.Conn]bool{}, calls: map[uint32]int{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Close stops serving and ends every connection.
func (s *Server) Close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Calls returns how many calls of each op were answered.
func (s *Server) Calls() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := map[uint32]string{opMemory: "memory", opMemoryV2: "memory_v2", opProcesses: "processes", opGPMGet: "gpm_get", opSamples: "samples", opInit: "init", opShutdown: "shutdown"}
	out := map[string]int{}
	for op, n := range s.calls {
		name := names[op]
		if name == "" {
			name = fmt.Sprint(op)
		}
		out[name] += n
	}
	return out
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c)
	}
}

func (s *Server) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return
		}
		op, n := binary.LittleEndian.Uint32(hdr[:4]), binary.LittleEndian.Uint32(hdr[4:])
		if n > maxRequest {
			return
		}
		req := make([]byte, n)
		if _, err := io.ReadFull(c, req); err != nil {
			return
		}
		ret, out := s.answer(op, &reader{b: req})
		reply := make([]byte, 8, 8+len(out))
		binary.LittleEndian.PutUint32(reply[:4], uint32(ret))
		binary.LittleEndian.PutUint32(reply[4:], uint32(len(out)))
		if _, err := c.Write(append(reply, out...)); err != nil {
			return
		}
	}
}

// answer makes one call. A call the simulated driver does not implement
// (go-nvml's mock panics on it) answers NOT_SUPPORTED.
func (s *Server) answer(op uint32, r *reader) (ret nvml.Return, out []byte) {
	defer func() {
		if p := recover(); p != nil {
			ret, out = nvml.ERROR_NOT_SUPPORTED, nil
		}
	}()
	s.mu.Lock()
	s.calls[op]++
	s.mu.Unlock()
	w := &writer{}
	ret = s.call(op, r, w)
	if ret != nvml.SUCCESS {
		return ret, nil
	}
	return ret, w.b
}

func (s *Server) call(op uint32, r *reader, w *writer) nvml.Return {
	lib := s.lib
	switch op {
	case opInit:
		return lib.Init()
	case opShutdown:
		return lib.Shutdown()
	case opDriverVersion:
		v, ret := lib.SystemGetDriverVersion()
		w.str(v)
		return ret
	case opNVMLVersion:
		v, ret := lib.SystemGetNVMLVersion()
		w.str(v)
		return ret
	case opCUDAVersion:
		v, ret := lib.SystemGetCudaDriverVersion()
		w.u32(uint32(v))
		return ret
	case opCount:
		n, ret := lib.DeviceGetCount()
		w.u32(uint32(n))
		return ret
	case opHandleByIndex:
		h, ret := lib.DeviceGetHandleByIndex(int(r.u32()))
		return s.handle(h, ret, w)
	case opHandleByUUID:
		h, ret := lib.DeviceGetHandleByUUID(r.str())
		return s.handle(h, ret, w)
	case opProcesses, opGPMFree, opGPMMetrics, opGPMAlloc:
		return s.callNoDevice(op, r, w)
	}
	h, ok := s.device(r.u32())
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	switch op {
	case opUUID:
		v, ret := h.GetUUID()
		w.str(v)
		return ret
	case opName:
		v, ret := h.GetName()
		w.str(v)
		return ret
	case opIndex:
		v, ret := h.GetIndex()
		w.u32(uint32(v))
		return ret
	case opMinor:
		v, ret := h.GetMinorNumber()
		w.u32(uint32(v))
		return ret
	case opMIGMode:
		cur, pending, ret := h.GetMigMode()
		w.u32(uint32(cur))
		w.u32(uint32(pending))
		return ret
	case opSamples:
		typ, last := nvml.SamplingType(r.u32()), r.u64()
		vt, samples, ret := h.GetSamples(typ, last)
		w.u32(uint32(vt))
		w.u32(uint32(len(samples)))
		for _, x := range samples {
			w.u64(x.TimeStamp)
			w.b = append(w.b, x.SampleValue[:]...)
		}
		return ret
	case opProcessUtilization:
		samples, ret := h.GetProcessUtilization(r.u64())
		w.u32(uint32(len(samples)))
		for _, x := range samples {
			w.u32(x.Pid)
			w.u64(x.TimeStamp)
			w.u32(x.SmUtil)
			w.u32(x.MemUtil)
			w.u32(x.EncUtil)
			w.u32(x.DecUtil)
		}
		return ret
	case opUtilizationRates:
		u, ret := h.GetUtilizationRates()
		w.u32(u.Gpu)
		w.u32(u.Memory)
		return ret
	case opMemory:
		m, ret := h.GetMemoryInfo()
		w.u64(m.Total)
		w.u64(m.Free)
		w.u64(m.Used)
		return ret
	case opMemoryV2:
		m, ret := h.GetMemoryInfo_v2()
		w.u64(m.Total)
		w.u64(m.Reserved)
		w.u64(m.Free)
		w.u64(m.Used)
		return ret
	case opPower:
		v, ret := h.GetPowerUsage()
		w.u32(v)
		return ret
	case opEnergy:
		v, ret := h.GetTotalEnergyConsumption()
		w.u64(v)
		return ret
	case opMaxMIG:
		v, ret := h.GetMaxMigDeviceCount()
		w.u32(uint32(v))
		return ret
	case opMIGHandle:
		m, ret := h.GetMigDeviceHandleByIndex(int(r.u32()))
		return s.handle(m, ret, w)
	case opParent:
		p, ret := h.GetDeviceHandleFromMigDeviceHandle()
		return s.handle(p, ret, w)
	case opIsMIG:
		v, ret := h.IsMigDeviceHandle()
		w.u32(map[bool]uint32{true: 1}[v])
		return ret
	case opGPUInstanceID:
		v, ret := h.GetGpuInstanceId()
		w.u32(uint32(v))
		return ret
	case opComputeInstanceID:
		v, ret := h.GetComputeInstanceId()
		w.u32(uint32(v))
		return ret
	case opAttributes:
		a, ret := h.GetAttributes()
		for _, v := range []uint32{a.MultiprocessorCount, a.SharedCopyEngineCount, a.SharedDecoderCount, a.SharedEncoderCount,
			a.SharedJpegCount, a.SharedOfaCount, a.GpuInstanceSliceCount, a.ComputeInstanceSliceCount} {
			w.u32(v)
		}
		w.u64(a.MemorySizeMB)
		return ret
	case opGPMSupport:
		sup, ret := h.GpmQueryDeviceSupport()
		w.u32(sup.IsSupportedDevice)
		return ret
	case opGPMGet:
		x, ok := s.sample(r.u32())
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return lib.GpmSampleGet(h, x)
	case opGPMMIGGet:
		gi := int(r.u32())
		x, ok := s.sample(r.u32())
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return lib.GpmMigSampleGet(h, gi, x)
	}
	return nvml.ERROR_NOT_SUPPORTED
}

// callNoDevice makes the calls whose first argument is not a device.
func (s *Server) callNoDevice(op uint32, r *reader, w *writer) nvml.Return {
	lib := s.lib
	switch op {
	case opProcesses:
		h, ok := s.device(r.u32())
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		var procs []nvml.ProcessInfo
		var ret nvml.Return
		switch r.u32() {
		case listCompute:
			procs, ret = h.GetComputeRunningProcesses()
		case listGfx:
			procs, ret = h.GetGraphicsRunningProcesses()
		case listMPS:
			procs, ret = h.GetMPSComputeRunningProcesses()
		default:
			return nvml.ERROR_INVALID_ARGUMENT
		}
		w.u32(uint32(len(procs)))
		for _, p := range procs {
			w.u32(p.Pid)
			w.u64(p.UsedGpuMemory)
			w.u32(p.GpuInstanceId)
			w.u32(p.ComputeInstanceId)
		}
		return ret
	case opGPMAlloc:
		x, ret := lib.GpmSampleAlloc()
		if ret != nvml.SUCCESS {
			return ret
		}
		s.mu.Lock()
		s.next++
		id := s.next
		s.samples[id] = x
		s.mu.Unlock()
		w.u32(id)
		return ret
	case opGPMFree:
		id := r.u32()
		s.mu.Lock()
		x, ok := s.samples[id]
		delete(s.samples, id)
		s.mu.Unlock()
		if !ok {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		return lib.GpmSampleFree(x)
	case opGPMMetrics:
		a, okA := s.sample(r.u32())
		b, okB := s.sample(r.u32())
		n := r.u32()
		if !okA || !okB || n > uint32(len(nvml.GpmMetricsGetType{}.Metrics)) {
			return nvml.ERROR_INVALID_ARGUMENT
		}
		m := &nvml.GpmMetricsGetType{NumMetrics: n, Sample1: a, Sample2: b}
		for i := range n {
			m.Metrics[i].MetricId = r.u32()
		}
		if ret := lib.GpmMetricsGet(m); ret != nvml.SUCCESS {
			return ret
		}
		for i := range n {
			w.u32(m.Metrics[i].NvmlReturn)
			w.u64(math.Float64bits(m.Metrics[i].Value))
		}
		return nvml.SUCCESS
	}
	return nvml.ERROR_NOT_SUPPORTED
}

// handle answers a handle with its ID, giving it one on first sight.
func (s *Server) handle(h nvml.Device, ret nvml.Return, w *writer) nvml.Return {
	if ret != nvml.SUCCESS {
		return ret
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.ids[h]
	if !ok {
		if len(s.handles) >= maxHandles {
			return nvml.ERROR_INSUFFICIENT_RESOURCES
		}
		id = uint32(len(s.handles))
		s.handles = append(s.handles, h)
		s.ids[h] = id
	}
	w.u32(id)
	return ret
}

func (s *Server) device(id uint32) (nvml.Device, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if int(id) >= len(s.handles) {
		return nil, false
	}
	return s.handles[id], true
}

func (s *Server) sample(id uint32) (nvml.GpmSample, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	x, ok := s.samples[id]
	return x, ok
}

type reader struct {
	b   []byte
	off int
}

func (r *reader) next(n int) []byte {
	if r.off+n > len(r.b) {
		r.off = len(r.b)
		return make([]byte, n)
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b
}
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }
func (r *reader) u64() uint64 { return binary.LittleEndian.Uint64(r.next(8)) }
func (r *reader) str() string { return string(r.next(int(min(r.u32(), maxRequest)))) }

type writer struct{ b []byte }

func (w *writer) u32(v uint32) { w.b = binary.LittleEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.LittleEndian.AppendUint64(w.b, v) }
func (w *writer) str(v string) { w.u32(uint32(len(v))); w.b = append(w.b, v...) }

// ErrNoCompiler is returned when gcc is missing.
var ErrNoCompiler = errors.New("nvmlfake: gcc not found")

// HaveCompiler reports whether Build can run.
func HaveCompiler() error {
	if _, err := exec.LookPath("gcc"); err != nil {
		return ErrNoCompiler
	}
	return nil
}
