package sim

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"google.golang.org/grpc/codes"
)

// Fault kinds a scenario's faults list may name.
const (
	// FaultNVMLError makes NVML calls on one GPU fail with Error over [From, To).
	FaultNVMLError = "nvml_error"
	// FaultGPULost makes every call on one GPU answer GPU_IS_LOST over
	// [From, To), as a GPU that fell off the bus; at To it is back after a
	// reset, with an empty sample ring.
	FaultGPULost = "gpu_lost"
	// FaultNVMLHang makes a call on one GPU block until To: NVML calls cannot
	// be cancelled.
	FaultNVMLHang = "nvml_hang"
	// FaultBadTimestamp adds one sample with an absurd timestamp (Stamp:
	// future, past or zero) to every samples answer of one GPU over [From, To).
	FaultBadTimestamp = "bad_timestamp"
	// FaultKubeletDown removes the kubelet's socket at From and restarts the
	// kubelet at To.
	FaultKubeletDown = "kubelet_down"
	// FaultKubeletRestart stops and restarts the kubelet at one instant, At
	// (From; To is From).
	FaultKubeletRestart = "kubelet_restart"
	// FaultKubeletSlow makes the kubelet answer after Delay over [From, To).
	FaultKubeletSlow = "kubelet_slow"
	// FaultKubeletError makes the kubelet answer Code over [From, To).
	FaultKubeletError = "kubelet_error"
	// FaultDeviceIDs makes the kubelet also list the raw device IDs IDs for
	// the container of pod Pod over [From, To): malformed IDs, or UUIDs this
	// node lacks.
	FaultDeviceIDs = "device_ids"
	// FaultGhostPod makes the kubelet also list pod Pod on GPU GPU over
	// [From, To), as older kubelets list terminated pods: the pod source says
	// its phase is Phase (Succeeded, Running, or unknown: the pod source does
	// not know it).
	FaultGhostPod = "ghost_pod"
	// FaultAPIServerDown makes the simulated API server (the node's
	// ResourceSlices) answer 503 to every request over [From, To), ending
	// its open watches at From: the agent's DRA source is down, and what
	// the driver publishes meanwhile is seen when it lists again.
	FaultAPIServerDown = "apiserver_down"
)

// NVML calls a fault can target, as the reader's error reasons name them.
const (
	CallSamples        = "samples"
	CallMemory         = "memory"
	CallPower          = "power"
	CallEnergy         = "energy"
	CallProcesses      = "processes"
	CallProcessSamples = "process_samples"
	// CallAll targets every per-device activity call above.
	CallAll = "all"
)

var faultCalls = []string{CallSamples, CallMemory, CallPower, CallEnergy, CallProcesses, CallProcessSamples, CallAll}

// faultErrors are the NVML return codes a nvml_error fault may inject.
var faultErrors = map[string]nvml.Return{
	"GPU_IS_LOST":   nvml.ERROR_GPU_IS_LOST,
	"UNKNOWN":       nvml.ERROR_UNKNOWN,
	"TIMEOUT":       nvml.ERROR_TIMEOUT,
	"NOT_SUPPORTED": nvml.ERROR_NOT_SUPPORTED,
	"NO_PERMISSION": nvml.ERROR_NO_PERMISSION,
}

// faultCodes are the gRPC codes a kubelet_error fault may answer.
var faultCodes = map[string]codes.Code{
	"ResourceExhausted": codes.ResourceExhausted,
	"Unavailable":       codes.Unavailable,
	"Internal":          codes.Internal,
	"Unknown":           codes.Unknown,
	"PermissionDenied":  codes.PermissionDenied,
	"DeadlineExceeded":  codes.DeadlineExceeded,
}

// Fault is one injected failure of the simulated node, active over
// [From, To) in scenario time.
type Fault struct {
	Kind     string
	From, To time.Duration
	// GPU is the GPU an NVML fault or a ghost pod concerns.
	GPU int
	// Call is the NVML call an nvml_error or nvml_hang fault targets.
	Call string
	// Error is the NVML return code of an nvml_error fault.
	Error nvml.Return
	// Code is the gRPC code of a kubelet_error fault.
	Code codes.Code
	// Delay is how late a kubelet_slow kubelet answers.
	Delay time.Duration
	// Namespace and Pod name the pod of a device_ids or ghost_pod fault.
	Namespace, Pod string
	// IDs are the raw device IDs of a device_ids fault.
	IDs []string
	// Phase is a ghost pod's phase as the pod source reports it; "" when
	// the pod source does not know the pod.
	Phase string
	// Stamp is a bad_timestamp fault's absurd timestamp: future, past or zero.
	Stamp string
}

func (f Fault) active(t time.Duration) bool { return f.From <= t && t < f.To }

// faultKeys are the keys each fault kind takes besides kind, from and to.
var faultKeys = map[string][]string{
	FaultNVMLError:      {"gpu", "call", "error"},
	FaultGPULost:        {"gpu"},
	FaultNVMLHang:       {"gpu", "call"},
	FaultBadTimestamp:   {"gpu", "stamp"},
	FaultKubeletDown:    {},
	FaultKubeletRestart: {"at"},
	FaultKubeletSlow:    {"delay"},
	FaultKubeletError:   {"code"},
	FaultDeviceIDs:      {"pod", "ids"},
	FaultGhostPod:       {"pod", "gpu", "phase"},
	FaultAPIServerDown:  {},
}

func faultKinds() []string {
	kinds := make([]string, 0, len(faultKeys))
	for k := range faultKeys {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// faults checks the scenario's faults list.
func (d *validator) faults(spec *ScenarioSpec, s *Scenario) error {
	for i := range spec.Faults {
		fs := &spec.Faults[i]
		p := fmt.Sprintf("faults[%d]", i)
		if err := d.required(p, "kind"); err != nil {
			return err
		}
		f := Fault{Kind: fs.Kind}
		keys, ok := faultKeys[f.Kind]
		if !ok {
			return d.errf(p+".kind", "%q is not a fault; want one of %s", f.Kind, strings.Join(faultKinds(), ", "))
		}
		for _, k := range []string{"at", "gpu", "call", "error", "stamp", "delay", "code", "pod", "ids", "phase"} {
			if d.has(p+"."+k) && !slices.Contains(keys, k) {
				return d.errf(p+"."+k, "is not a field of a %s fault", f.Kind)
			}
		}
		if err := d.faultTimes(p, fs, s, &f); err != nil {
			return err
		}
		if f.From < s.LeadIn {
			key := "from"
			if f.Kind == FaultKubeletRestart {
				key = "at"
			}
			return d.errf(p+"."+key, "%s is within the lead_in (%s), which agent --simulate plays at once on a virtual clock; a fault must start at or after it",
				fmtDur(f.From), fmtDur(s.LeadIn))
		}
		if err := d.faultFields(p, fs, s, &f); err != nil {
			return err
		}
		s.Faults = append(s.Faults, f)
	}
	return nil
}

func (d *validator) faultTimes(p string, fs *FaultSpec, s *Scenario, f *Fault) error {
	var err error
	if f.Kind == FaultKubeletRestart {
		if d.has(p+".from") || d.has(p+".to") {
			return d.errAt(d.first(p+".from", p+".to"), p+".at", "a kubelet_restart happens at one instant; give at, not from and to")
		}
		if err := d.required(p, "at"); err != nil {
			return err
		}
		f.From, err = d.offset(p+".at", *fs.At, s.Duration)
		f.To = f.From
		return err
	}
	if err := d.required(p, "from", "to"); err != nil {
		return err
	}
	if f.From, err = d.offset(p+".from", *fs.From, s.Duration); err != nil {
		return err
	}
	if f.To, err = d.offset(p+".to", *fs.To, s.Duration); err != nil {
		return err
	}
	if f.To <= f.From {
		return d.errf(p+".to", "%s is not after from (%s)", fmtDur(f.To), fmtDur(f.From))
	}
	return nil
}

func (d *validator) faultFields(p string, fs *FaultSpec, s *Scenario, f *Fault) error {
	if slices.Contains(faultKeys[f.Kind], "gpu") {
		if err := d.required(p, "gpu"); err != nil {
			return err
		}
		dev, err := d.gpu(p+".gpu", fs.GPU.DeviceSpec, s.GPUs)
		if err != nil {
			return err
		}
		if dev.Replicated {
			return d.errf(p+".gpu", "%s: a fault concerns a whole GPU; want gpu:%d", dev, dev.GPU)
		}
		if _, on := s.MIG[dev.GPU]; on {
			return d.errf(p+".gpu", "%s is in MIG mode; faults are simulated on whole GPUs only", dev)
		}
		f.GPU = dev.GPU
	}
	switch f.Kind {
	case FaultNVMLError, FaultNVMLHang:
		f.Call = CallSamples
		if f.Kind == FaultNVMLError {
			f.Call = CallAll
		}
		if d.has(p + ".call") {
			f.Call = fs.Call
			if !slices.Contains(faultCalls, f.Call) {
				return d.errf(p+".call", "%q is not an NVML call; want one of %s", f.Call, strings.Join(faultCalls, ", "))
			}
		}
		if f.Kind == FaultNVMLError {
			if err := d.required(p, "error"); err != nil {
				return err
			}
			ret, ok := faultErrors[fs.Error]
			if !ok {
				return d.errf(p+".error", "%q is not an injectable NVML error; want one of %s", fs.Error, strings.Join(sortedKeys(faultErrors), ", "))
			}
			f.Error = ret
		}
	case FaultBadTimestamp:
		if err := d.required(p, "stamp"); err != nil {
			return err
		}
		f.Stamp = fs.Stamp
		if f.Stamp != "future" && f.Stamp != "past" && f.Stamp != "zero" {
			return d.errf(p+".stamp", "%q is not one of future, past, zero", f.Stamp)
		}
	case FaultKubeletSlow:
		if err := d.required(p, "delay"); err != nil {
			return err
		}
		if f.Delay = time.Duration(fs.Delay); f.Delay == 0 {
			return d.errf(p+".delay", "must be longer than 0s")
		}
	case FaultKubeletError:
		if err := d.required(p, "code"); err != nil {
			return err
		}
		c, ok := faultCodes[fs.Code]
		if !ok {
			return d.errf(p+".code", "%q is not an injectable gRPC code; want one of %s", fs.Code, strings.Join(sortedKeys(faultCodes), ", "))
		}
		f.Code = c
	case FaultDeviceIDs, FaultGhostPod:
		if err := d.required(p, "pod"); err != nil {
			return err
		}
		ns, name, ok := strings.Cut(fs.Pod, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return d.errf(p+".pod", "%q is not namespace/name", fs.Pod)
		}
		f.Namespace, f.Pod = ns, name
		if f.Kind == FaultDeviceIDs {
			if err := d.required(p, "ids"); err != nil {
				return err
			}
			if len(fs.IDs) == 0 {
				return d.errf(p+".ids", "must name at least one device ID")
			}
			f.IDs = fs.IDs
			return nil
		}
		f.Phase = "Succeeded"
		if d.has(p + ".phase") {
			switch f.Phase = fs.Phase; f.Phase {
			case "Succeeded", "Failed", "Running":
			case "unknown":
				f.Phase = ""
			default:
				return d.errf(p+".phase", "%q is not one of Succeeded, Failed, Running, unknown", f.Phase)
			}
		}
		for i, sp := range s.Pods {
			if sp.Namespace == f.Namespace && sp.Name == f.Pod {
				return d.errf(p+".pod", "%s is pods[%d]; a ghost pod is one the scenario does not run", fs.Pod, i)
			}
		}
	}
	return nil
}

// The simulated driver's faults.

// nvmlFault returns the error an NVML call on GPU g answers at the clock's
// now, if a fault makes it fail. A hang blocks the caller until the hang's
// end on the node's clock, or until Close, then answers as the call would.
func (n *Node) nvmlFault(g int, call string) (nvml.Return, bool) {
	if ret, ok := n.reloadFault(); ok {
		return ret, true
	}
	if len(n.sc.Faults) == 0 {
		return nvml.SUCCESS, false
	}
	t, _ := n.now()
	for _, f := range n.sc.Faults {
		if f.GPU != g || !f.active(t) {
			continue
		}
		switch {
		case f.Kind == FaultGPULost:
			return nvml.ERROR_GPU_IS_LOST, true
		case f.Kind == FaultNVMLError && (f.Call == call || f.Call == CallAll):
			return f.Error, true
		case f.Kind == FaultNVMLHang && (f.Call == call || f.Call == CallAll):
			n.block(f.To)
			return n.nvmlFault(g, call)
		}
	}
	return nvml.SUCCESS, false
}

// hangPoll is how often a hung call looks at the clock: a virtual clock
// cannot wake anyone when it is set.
const hangPoll = time.Millisecond

// block waits until the node's clock reaches scenario time to, or until Close.
func (n *Node) block(to time.Duration) {
	n.hangMu.Lock()
	n.hangEnds[to]++
	n.hangMu.Unlock()
	defer func() {
		n.hangMu.Lock()
		if n.hangEnds[to]--; n.hangEnds[to] == 0 {
			delete(n.hangEnds, to)
		}
		n.hangMu.Unlock()
	}()
	t := time.NewTicker(hangPoll)
	defer t.Stop()
	for {
		if now, _ := n.now(); now >= to {
			return
		}
		select {
		case <-n.closed:
			return
		case <-t.C:
		}
	}
}

// BlockedCalls is the number of NVML calls held by a hang fault that has
// not ended at the clock's now. After moving a virtual clock, a caller can
// wait until its own count of calls in flight equals it: every call a hang
// released has then returned.
func (n *Node) BlockedCalls() int {
	now, _ := n.now()
	n.hangMu.Lock()
	defer n.hangMu.Unlock()
	c := 0
	for to, k := range n.hangEnds {
		if to > now {
			c += k
		}
	}
	return c
}

// Close releases every NVML call a hang fault holds, as a driver unloaded
// under a blocked caller would. The node answers as before afterwards.
func (n *Node) Close() {
	n.closeOnce.Do(func() { close(n.closed) })
}

// resetAt is the end of the latest gpu_lost fault on GPU g that has ended by
// scenario time t: the reset emptied the driver's sample ring then.
func (n *Node) resetAt(g int, t time.Duration) (time.Duration, bool) {
	at, found := n.migModeReset(g, t)
	for _, f := range n.sc.Faults {
		if f.Kind == FaultGPULost && f.GPU == g && f.To <= t && f.To >= at {
			at, found = f.To, true
		}
	}
	return at, found
}

// badStamp is the absurd timestamp a bad_timestamp fault adds to GPU g's
// samples at scenario time t, if one is active.
func (n *Node) badStamp(g int, t time.Duration) (uint64, bool) {
	for _, f := range n.sc.Faults {
		if f.Kind != FaultBadTimestamp || f.GPU != g || !f.active(t) {
			continue
		}
		switch f.Stamp {
		case "future":
			return uint64(n.sc.Start.Add(t).Add(100 * 365 * 24 * time.Hour).UnixMicro()), true
		case "past":
			return uint64(time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()), true
		default:
			return 0, true
		}
	}
	return 0, false
}

// The simulated kubelet's faults.

// KubeletState is what the kubelet's faults make of it at one instant.
type KubeletState struct {
	// Down is true while the socket is removed.
	Down bool
	// Code is the gRPC code every call answers, codes.OK for none.
	Code codes.Code
	// Delay is how late every call answers.
	Delay time.Duration
}

// APIServerDownAt reports whether an apiserver_down fault is active at
// scenario time t.
func (s *Scenario) APIServerDownAt(t time.Duration) bool {
	for _, f := range s.Faults {
		if f.Kind == FaultAPIServerDown && f.active(t) {
			return true
		}
	}
	return false
}

// KubeletStateAt returns the kubelet's state at scenario time t.
func (s *Scenario) KubeletStateAt(t time.Duration) KubeletState {
	var st KubeletState
	for _, f := range s.Faults {
		if !f.active(t) {
			continue
		}
		switch f.Kind {
		case FaultKubeletDown:
			st.Down = true
		case FaultKubeletError:
			st.Code = f.Code
		case FaultKubeletSlow:
			st.Delay = max(st.Delay, f.Delay)
		}
	}
	return st
}

// FaultPlayer drives a fake kubelet through the scenario's kubelet faults:
// Apply, called with the clock's time before each poll, stops, restarts and
// configures the server as the faults say.
type FaultPlayer struct {
	sc     *Scenario
	srv    *KubeletServer
	socket string
	// deadline, when positive, plays a slow kubelet on a virtual clock: a
	// delay of at least deadline answers DeadlineExceeded at once (the
	// client would have given up), a shorter one answers at once; zero
	// makes the server really wait.
	deadline time.Duration
	cur      KubeletState
	restarts int // kubelet_restart faults played, in time order
	last     time.Duration
}

// NewFaultPlayer returns a player for srv serving on socket. With a positive
// virtualDeadline (the client's deadline), delays are played without
// waiting, for a virtual clock.
func NewFaultPlayer(sc *Scenario, srv *KubeletServer, socket string, virtualDeadline time.Duration) *FaultPlayer {
	return &FaultPlayer{sc: sc, srv: srv, socket: socket, deadline: virtualDeadline, last: -1}
}

// Apply brings the server to the faults' state at time now. It reports
// whether the server was (re)started, so that a caller on a virtual clock
// can wait for its client to reconnect before the next call.
func (p *FaultPlayer) Apply(now time.Time) (started bool, err error) {
	t := now.Sub(p.sc.Start)
	st := p.sc.KubeletStateAt(t)
	// Instant restarts between the last call and now.
	for _, f := range p.sc.Faults {
		if f.Kind == FaultKubeletRestart && f.From > p.last && f.From <= t && !st.Down && !p.cur.Down {
			p.srv.Stop()
			if err := p.srv.Start(p.socket); err != nil {
				return false, err
			}
			started = true
		}
	}
	p.last = t
	switch {
	case st.Down && !p.cur.Down:
		p.srv.Stop()
	case !st.Down && p.cur.Down:
		if err := p.srv.Start(p.socket); err != nil {
			return false, err
		}
		started = true
	}
	code, delay := st.Code, st.Delay
	if p.deadline > 0 && delay > 0 {
		if delay >= p.deadline && code == codes.OK {
			code = codes.DeadlineExceeded
		}
		delay = 0
	}
	if code != p.cur.Code || (p.cur.Delay != delay) {
		p.srv.SetError(code)
		p.srv.SetDelay(delay)
	}
	p.cur = KubeletState{Down: st.Down, Code: code, Delay: delay}
	return started, nil
}

// ghost is a ghost_pod fault's pod as the pod source reports it.
func (n *Node) ghost(namespace, name string) (Fault, bool) {
	t, _ := n.now()
	for _, f := range n.sc.Faults {
		if f.Kind == FaultGhostPod && f.Namespace == namespace && f.Pod == name && f.Phase != "" && (f.active(t) || t >= f.To) {
			return f, true
		}
	}
	return Fault{}, false
}
