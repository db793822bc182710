package agent

import (
	"errors"
	"slices"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/collector/workload"
)

// PodSource knows what pod-resources does not: a pod's UID, phase, owner
// and container IDs. The simulated node and the pod informer satisfy it.
type PodSource interface {
	Pod(namespace, name string) (collector.Pod, bool)
	PodByUID(uid string) (collector.Pod, bool)
}

// ProcessResolver maps host PIDs to the pod and container whose cgroup they
// run in (collector/proc). Errors are counted under source "proc".
type ProcessResolver interface {
	Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error)
}

// Option configures optional sources of an Engine.
type Option func(*Engine)

// WithPods gives the engine a pod source: allocation series gain workload and
// model, pods in a terminal phase stop accruing, and shared GPUs can be
// attributed per process.
func WithPods(p PodSource) Option { return func(e *Engine) { e.pods = p } }

// DRAHealth is the health of the source that resolves DRA devices
// (collector/dra's ResourceSlice source), reported as source "dra": whether
// it is up, and the failures it met since the last call.
type DRAHealth interface {
	Health() (up bool, errs []error)
}

// WithDRA registers source "dra", whose health h reports; the problems of
// an allocation list that name source "dra" (devices that could not be
// resolved) are counted under it. Without it they count under "kubelet".
func WithDRA(h DRAHealth) Option { return func(e *Engine) { e.dra = h } }

// WithProcesses gives the engine a PID resolver for per-process attribution
// on shared GPUs.
func WithProcesses(r ProcessResolver) Option { return func(e *Engine) { e.procs = r } }

// procOwner is the pod (and, when known, container) a GPU process runs in;
// the zero procOwner is a process known to run in no pod.
type procOwner struct {
	namespace, pod, container string
}

// owners resolves every PID seen on a GPU to the pod it runs in, or to the
// zero procOwner for a process in no pod. A PID it could not resolve (not
// visible without hostPID, or gone) or whose pod the pod source does not
// know (yet) is absent: devices with such a process fall back to the
// device's samples rather than call it idle or unattributed. It returns nil
// when process attribution is not possible (no resolver or pod source).
func (e *Engine) owners(snap collector.DeviceSnapshot) map[uint32]procOwner {
	if e.procs == nil || e.pods == nil {
		return nil
	}
	n := 0
	for _, rd := range snap.Devices {
		n += len(rd.Processes) + len(rd.ProcessSamples)
	}
	pids := make([]uint32, 0, n)
	for _, rd := range snap.Devices {
		for _, p := range rd.Processes {
			pids = append(pids, p.PID)
		}
		for _, p := range rd.ProcessSamples {
			pids = append(pids, p.PID)
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	infos, errs := e.procs.Resolve(pids)
	e.observeSource(collector.SourceProc, nil, errs)
	// The command lines of processes that have exited need not be kept.
	for id := range e.noModel {
		if info, ok := infos[id.pid]; !ok || info.StartTime != id.start {
			delete(e.noModel, id)
		}
	}
	out := e.ownerOf
	clear(out)
	for pid, info := range infos {
		if info.PodUID == "" {
			out[pid] = procOwner{}
			continue
		}
		pod, ok := e.pods.PodByUID(info.PodUID)
		if !ok {
			continue
		}
		if pod.Model == "" && e.cmdModels[pod.UID] == "" {
			e.cmdlineModel(pod.UID, info)
		}
		o := procOwner{namespace: pod.Namespace, pod: pod.Name}
		if info.ContainerID != "" {
			for name, id := range pod.ContainerIDs {
				if id == info.ContainerID {
					o.container = name
				}
			}
		}
		out[pid] = o
	}
	return out
}

// procID tells processes apart: a PID the kernel hands out again goes to a
// process with another start time.
type procID struct {
	pid   uint32
	start uint64
}

// cmdlineModel looks for a model name in the command line of process info
// of pod uid, then in its parents' (a worker that titles itself carries
// the model on a parent's), and keeps the first found. Only the model
// name is kept; a command line can hold secrets. A process whose command
// line names none is remembered, and not parsed again.
func (e *Engine) cmdlineModel(uid string, info collector.ProcessInfo) {
	id := procID{pid: info.PID, start: info.StartTime}
	if e.noModel[id] {
		return
	}
	if m := workload.ModelFromCmdline(info.Cmdline); m != "" {
		e.cmdModels[uid] = m
		return
	}
	for _, c := range info.Ancestors {
		if m := workload.ModelFromCmdline(c); m != "" {
			e.cmdModels[uid] = m
			return
		}
	}
	// An empty command line was read mid-exec: the next read may name it.
	if len(info.Cmdline) > 0 {
		e.noModel[id] = true
	}
}

// holderOf returns the index in holders of the holder the process belongs
// to, or -1.
func holderOf(o procOwner, holders []allocKey) int {
	if o.pod == "" {
		return -1
	}
	podMatch := -1
	for i, k := range holders {
		if k.Namespace != o.namespace || k.Pod != o.pod {
			continue
		}
		if o.container == "" || k.Container == o.container {
			return i
		}
		if podMatch < 0 {
			podMatch = i
		}
	}
	return podMatch
}

// memory credits each process's memory to the allocation that owns it on
// device uuid now, or to the device's unattributed memory.
func (e *Engine) memory(ds *deviceState, rd collector.DeviceReading, owners map[uint32]procOwner) {
	holders, known := e.latestHolders(ds.info.UUID)
	for _, k := range holders {
		if as := e.alloc[k]; as != nil {
			as.hasMemory, as.memory = false, 0
		}
	}
	ds.hasUnattributed, ds.unattributedMem = false, 0
	if !rd.HasProcesses || !known || ds.info.MIGEnabled {
		return
	}
	if !e.resolved(rd, owners, &ds.share) {
		// Without process attribution the only sure case is one exclusive
		// holder: every process on the device is taken to be its.
		if len(holders) == 1 && !e.alloc[holders[0]].shared {
			as := e.alloc[holders[0]]
			as.hasMemory = true
			for _, p := range rd.Processes {
				as.memory += p.UsedMemoryBytes
				// A process whose memory NVML does not say makes the sum unknown.
				as.hasMemory = as.hasMemory && !p.MemoryUnknown
			}
		}
		return
	}
	ds.hasUnattributed = true
	for _, k := range holders {
		e.alloc[k].hasMemory = true
	}
	for _, p := range rd.Processes {
		if o, ok := owners[p.PID]; ok {
			if i := holderOf(o, holders); i >= 0 {
				as := e.alloc[holders[i]]
				as.memory += p.UsedMemoryBytes
				as.hasMemory = as.hasMemory && !p.MemoryUnknown
				continue
			}
		}
		ds.unattributedMem += p.UsedMemoryBytes
		ds.hasUnattributed = ds.hasUnattributed && !p.MemoryUnknown
	}
}

// podHealth lets a pod source report its own health (an informer that
// cannot reach the API server) and the failures it met since the last call,
// which are counted; the simulated node has none to report.
type podHealth interface {
	Health() (up bool, errs []error)
}

var errPodsDown = errors.New("pod source is down")

func (e *Engine) observePods() {
	if e.pods == nil {
		return
	}
	up, errs := true, []error(nil)
	if h, ok := e.pods.(podHealth); ok {
		up, errs = h.Health()
	}
	var down error
	if !up {
		down = errPodsDown
	}
	e.observeSource(collector.SourcePods, down, errs)
}

var errDRADown = errors.New("ResourceSlice source is down")

// observeDRA records the DRA source's health with the problems of the
// allocation list that are its own, and returns the others.
func (e *Engine) observeDRA(problems []error) []error {
	if e.dra == nil {
		return problems
	}
	up, errs := e.dra.Health()
	var rest []error
	for _, p := range problems {
		var se *collector.SourceError
		if errors.As(p, &se) && se.Source == collector.SourceDRA {
			errs = append(errs, p)
			continue
		}
		rest = append(rest, p)
	}
	var down error
	if !up {
		down = errDRADown
	}
	e.observeSource(collector.SourceDRA, down, errs)
	return rest
}
