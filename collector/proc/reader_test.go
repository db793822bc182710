package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/gpuxray/gpuxray/collector"
)

const (
	uidA = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	uidB = "f0e1d2c3-b4a5-4968-8776-5a4b3c2d1e0f"
	cidA = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa00112233445566778899"
	cidB = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// statLine is a realistic /proc/<pid>/stat line with comm and starttime.
func statLine(pid uint32, comm string, start uint64) string {
	return strconv.FormatUint(uint64(pid), 10) + " (" + comm + ") S 1 4242 4242 0 -1 4194560 50633 0 12 0 " +
		"1207 312 0 0 20 0 57 0 " + strconv.FormatUint(start, 10) +
		" 36511506432 1209863 18446744073709551615 1 1 0 0 0 0 0 16781312 17642 0 0 0 17 3 0 0 0 0 0 0 0 0 0 0 0 0 0\n"
}

func cgroupOf(uid, cid string) string {
	return "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
		strings.ReplaceAll(uid, "-", "_") + ".slice/cri-containerd-" + cid + ".scope\n"
}

// writeProc writes /proc/<pid>/{stat,cgroup,cmdline} under root.
func writeProc(t *testing.T, root string, pid uint32, comm string, start uint64, cgroup string, args ...string) {
	t.Helper()
	dir := filepath.Join(root, strconv.FormatUint(uint64(pid), 10))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmdline := ""
	if len(args) > 0 {
		cmdline = strings.Join(args, "\x00") + "\x00"
	}
	for name, content := range map[string]string{"stat": statLine(pid, comm, start), "cgroup": cgroupOf(uidA, cidA), "cmdline": cmdline} {
		if name == "cgroup" {
			content = cgroup
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		root, want string
	}{
		{"/proc", ""},
		{"/host/proc", ""},
		{"", "the proc root is empty"},
		{"host/proc", `the proc root "host/proc" is not absolute`},
	}
	for _, tt := range tests {
		err := Config{Root: tt.root}.Validate()
		if got := errString(err); got != tt.want {
			t.Errorf("Validate(%q) = %q, want %q", tt.root, got, tt.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestResolve(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 100, "python3", 5000, cgroupOf(uidA, cidA), "python3", "train.py", "--model", "llama")
	writeProc(t, root, 200, "leak", 6000, "0::/system.slice/leak.service\n", "/opt/leak")
	writeProc(t, root, 300, "crio", 7000, "0::/kubepods/besteffort/pod"+uidB+"/crio-conmon-"+cidB+"\n")
	r := New(Config{Root: root}, nil)

	got, errs := r.Resolve([]uint32{100, 200, 300, 404, 100})
	if len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
	want := map[uint32]collector.ProcessInfo{
		100: {PID: 100, StartTime: 5000, PodUID: uidA, ContainerID: cidA, Cmdline: []string{"python3", "train.py", "--model", "llama"}},
		200: {PID: 200, StartTime: 6000, Cmdline: []string{"/opt/leak"}},
		300: {PID: 300, StartTime: 7000, PodUID: uidB},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Resolve = %+v\nwant %+v", got, want)
	}
	if len(r.cache) != 3 {
		t.Errorf("cache holds %d PIDs, want 3", len(r.cache))
	}

	// A PID that is no longer asked for is forgotten.
	if _, errs := r.Resolve([]uint32{100}); len(errs) != 0 {
		t.Errorf("errors: %v", errs)
	}
	if _, ok := r.cache[200]; ok || len(r.cache) != 1 {
		t.Errorf("cache holds %v, want only PID 100", keys(r.cache))
	}
	if got, _ := r.Resolve(nil); len(got) != 0 || len(r.cache) != 0 {
		t.Errorf("Resolve(nil) = %v with %d cached, want nothing", got, len(r.cache))
	}
}

func keys(m map[uint32]entry) []uint32 {
	var out []uint32
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestResolvePIDReuse checks that a cached PID is answered from the cache
// while its process lives, and read afresh once the kernel hands the PID to
// a process that started later.
func TestResolvePIDReuse(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 4242, "python3", 1000, cgroupOf(uidA, cidA), "python3", "a.py")
	r := New(Config{Root: root}, nil)
	if got, _ := r.Resolve([]uint32{4242}); got[4242].PodUID != uidA {
		t.Fatalf("first read: %+v", got[4242])
	}

	// Same start time: a cache hit reads only stat, so a changed cgroup file
	// is not seen (proving the hit), and the old answer stands.
	writeProc(t, root, 4242, "python3", 1000, cgroupOf(uidB, cidB), "python3", "b.py")
	got, errs := r.Resolve([]uint32{4242})
	if len(errs) != 0 || got[4242].PodUID != uidA || got[4242].Cmdline[1] != "a.py" {
		t.Errorf("same start time: %+v, %v; want the cached pod %s", got[4242], errs, uidA)
	}

	// A new start time is a new process: read it again.
	writeProc(t, root, 4242, "python3", 9000, cgroupOf(uidB, cidB), "python3", "b.py")
	got, errs = r.Resolve([]uint32{4242})
	want := collector.ProcessInfo{PID: 4242, StartTime: 9000, PodUID: uidB, ContainerID: cidB, Cmdline: []string{"python3", "b.py"}}
	if len(errs) != 0 || !reflect.DeepEqual(got[4242], want) {
		t.Errorf("reused PID: %+v, %v; want %+v", got[4242], errs, want)
	}
}

// TestResolveEmptyCmdlineReadAgain: a process read mid-exec (an empty
// command line; exec keeps the PID and start time) is read again at the
// next call, not cached for its life without a name; once named, it is
// cached.
func TestResolveEmptyCmdlineReadAgain(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 4242, "python3", 1000, cgroupOf(uidA, cidA))
	r := New(Config{Root: root}, nil)
	if got, errs := r.Resolve([]uint32{4242}); len(errs) != 0 || got[4242].PodUID != uidA || len(got[4242].Cmdline) != 0 {
		t.Fatalf("mid-exec: %+v, %v", got[4242], errs)
	}
	writeProc(t, root, 4242, "python3", 1000, cgroupOf(uidA, cidA), "vllm", "serve", "meta-llama/Llama-3.1-8B")
	got, errs := r.Resolve([]uint32{4242})
	want := []string{"vllm", "serve", "meta-llama/Llama-3.1-8B"}
	if len(errs) != 0 || !reflect.DeepEqual(got[4242].Cmdline, want) || got[4242].PodUID != uidA {
		t.Fatalf("after exec: %+v, %v; want command line %q", got[4242], errs, want)
	}
	// Named now: a cache hit, which reads only stat (a changed command
	// line is not seen).
	writeProc(t, root, 4242, "python3", 1000, cgroupOf(uidA, cidA), "other")
	if got, _ := r.Resolve([]uint32{4242}); !reflect.DeepEqual(got[4242].Cmdline, want) {
		t.Errorf("named process read again: %q, want the cached %q", got[4242].Cmdline, want)
	}
	r.Resolve(nil)
}

// TestResolveGone checks that a process that exits between polls, or
// between the reads of one poll, is left out without an error.
func TestResolveGone(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 7, "python3", 1000, cgroupOf(uidA, cidA), "python3")
	writeProc(t, root, 8, "python3", 1000, cgroupOf(uidA, cidA), "python3")
	if err := os.Remove(filepath.Join(root, "8", "cgroup")); err != nil {
		t.Fatal(err)
	}
	r := New(Config{Root: root}, nil)
	if _, errs := r.Resolve([]uint32{7}); len(errs) != 0 {
		t.Fatal(errs)
	}
	if err := os.RemoveAll(filepath.Join(root, "7")); err != nil {
		t.Fatal(err)
	}
	got, errs := r.Resolve([]uint32{7, 8, 9})
	if len(got) != 0 || len(errs) != 0 {
		t.Errorf("Resolve of exited processes = %v, %v; want nothing and no error", got, errs)
	}
	if len(r.cache) != 0 {
		t.Errorf("cache holds %v after the processes exited", keys(r.cache))
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeProc(t, root, 1, "ok", 10, cgroupOf(uidA, cidA), "ok")
	writeProc(t, root, 2, "badstat", 10, cgroupOf(uidA, cidA))
	if err := os.WriteFile(filepath.Join(root, "2", "stat"), []byte("2 (badstat S 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeProc(t, root, 3, "shortstat", 10, cgroupOf(uidA, cidA))
	if err := os.WriteFile(filepath.Join(root, "3", "stat"), []byte("3 (shortstat) S 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeProc(t, root, 4, "unreadable", 10, "")
	// A directory where the cgroup file should be: reading it fails with EISDIR.
	if err := os.Remove(filepath.Join(root, "4", "cgroup")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(root, "4", "cgroup"), 0o755); err != nil {
		t.Fatal(err)
	}

	r := New(Config{Root: root}, nil)
	got, errs := r.Resolve([]uint32{1, 2, 3, 4})
	if len(got) != 1 || got[1].PodUID != uidA {
		t.Errorf("Resolve = %v, want only PID 1", got)
	}
	var reasons []string
	for _, err := range errs {
		var se *collector.SourceError
		if !errors.As(err, &se) || se.Source != collector.SourceProc {
			t.Errorf("error %v is %T, want a proc *collector.SourceError", err, err)
			continue
		}
		reasons = append(reasons, se.Reason)
	}
	if want := []string{"parse", "parse", "read"}; !reflect.DeepEqual(reasons, want) {
		t.Errorf("reasons %v, want %v (errors %v)", reasons, want, errs)
	}
}

func TestResolveHugeCmdline(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	long := strings.Repeat("x", 1<<20)
	writeProc(t, root, 1, "python3", 10, cgroupOf(uidA, cidA), "python3", "--token="+long, "tail")
	many := make([]string, 100000)
	for i := range many {
		many[i] = "-v"
	}
	writeProc(t, root, 2, "python3", 10, cgroupOf(uidA, cidA), many...)
	r := New(Config{Root: root}, nil)
	got, errs := r.Resolve([]uint32{1, 2})
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	one := got[1].Cmdline
	if len(one) != 2 || one[0] != "python3" || len(one[0])+1+len(one[1]) != MaxCmdlineBytes {
		t.Errorf("1 MiB argument: %d args, %d bytes; want the first %d bytes in 2 args", len(one), len(strings.Join(one, "\x00")), MaxCmdlineBytes)
	}
	if n := len(got[2].Cmdline); n != MaxCmdlineArgs {
		t.Errorf("100,000 arguments: kept %d, want %d", n, MaxCmdlineArgs)
	}
	if got[1].PodUID != uidA || got[2].PodUID != uidA {
		t.Errorf("pods %q, %q; want %q", got[1].PodUID, got[2].PodUID, uidA)
	}
}

func TestParseStartTime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, stat string
		want       uint64
		err        bool
	}{
		{"plain", statLine(1, "python3", 123456), 123456, false},
		{"spaces in comm", statLine(1, "my worker 3", 77), 77, false},
		{"parentheses in comm", statLine(1, "a) S 1 2 (b", 88), 88, false},
		{"only a closing parenthesis in comm", statLine(1, ") ) )", 99), 99, false},
		{"no comm", "1 python3 S 1", 0, true},
		{"truncated", "1 (python3) S 1 1 1 0 -1", 0, true},
		{"starttime not a number", strings.Replace(statLine(1, "p", 5), " 5 ", " five ", 1), 0, true},
		{"starttime negative", strings.Replace(statLine(1, "p", 5), " 5 ", " -5 ", 1), 0, true},
		{"starttime overflows", strings.Replace(statLine(1, "p", 5), " 5 ", " 18446744073709551616 ", 1), 0, true},
		{"starttime largest", strings.Replace(statLine(1, "p", 5), " 5 ", " 18446744073709551615 ", 1), 1<<64 - 1, false},
		{"tabs and newlines between fields", strings.ReplaceAll(statLine(1, "p", 6), " ", "\t"), 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseStartTime([]byte(tt.stat))
			if got != tt.want || (err != nil) != tt.err {
				t.Errorf("ParseStartTime(%q) = %d, %v; want %d, error %v", tt.stat, got, err, tt.want, tt.err)
			}
		})
	}
}

// FuzzParseStartTime checks the hand-counted field scan against the plain
// reading of proc(5): split on whitespace after the last ')', parse the 20th
// field as an unsigned decimal.
func FuzzParseStartTime(f *testing.F) {
	f.Add([]byte(statLine(1, "python3", 123456)))
	f.Add([]byte(statLine(1, "a) S 1 2 (b", 88)))
	f.Add([]byte("1 (p) S 1 1 1 0 -1"))
	f.Fuzz(func(t *testing.T, stat []byte) {
		got, err := ParseStartTime(stat)
		var want uint64
		var wantErr error
		if i := bytes.LastIndexByte(stat, ')'); i < 0 {
			wantErr = errors.New("no ')'")
		} else if fields := bytes.Fields(stat[i+1:]); len(fields) < 20 {
			wantErr = errors.New("too few fields")
		} else if strings.HasPrefix(string(fields[19]), "+") {
			wantErr = errors.New("signed") // ParseUint takes no sign either, but be explicit
		} else {
			want, wantErr = strconv.ParseUint(string(fields[19]), 10, 64)
		}
		// bytes.Fields splits on every Unicode space; stat has only ASCII
		// ones, and the parser splits on space, tab and newline alone.
		if bytes.ContainsFunc(stat, func(r rune) bool { return r != ' ' && r != '\t' && r != '\n' && unicode.IsSpace(r) }) {
			return
		}
		if wantErr != nil {
			want = 0
		}
		if (err != nil) != (wantErr != nil) || got != want {
			t.Errorf("ParseStartTime(%q) = %d, %v; the plain reading gives %d, %v", stat, got, err, want, wantErr)
		}
	})
}

func TestSplitCmdline(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"\x00", nil},
		{"python3\x00train.py\x00", []string{"python3", "train.py"}},
		{"python3\x00\x00x\x00", []string{"python3", "", "x"}},
		{"nginx: worker process", []string{"nginx: worker process"}}, // setproctitle
	}
	for _, tt := range tests {
		if got := SplitCmdline([]byte(tt.in)); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("SplitCmdline(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// openFDs is the number of this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// TestResolveRealProc resolves a live child process through the real /proc:
// read once, then answered through its held stat file while it lives, and
// gone without an error once it has exited and been reaped (its stat read
// fails: procfs needs no fstat), its file closed.
// (Not parallel: it counts this process's descriptors.)
func TestResolveRealProc(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skip("cannot start sleep:", err)
	}
	defer cmd.Process.Kill()
	base := openFDs(t) // after Start: os.Process may hold a pidfd
	pid := uint32(cmd.Process.Pid)
	// Start returns once exec has closed the child's close-on-exec
	// descriptors, which is before the kernel has laid out the new
	// argument vector: until then /proc/<pid>/cmdline reads empty.
	awaitCmdline(t, pid, "sleep\x0060\x00")
	r := New(Config{Root: "/proc"}, nil)
	if !r.procfs {
		t.Error("/proc is not taken for a proc filesystem: its checks would fstat")
	}
	for i := range 2 {
		got, errs := r.Resolve([]uint32{pid})
		if len(errs) != 0 || !reflect.DeepEqual(got[pid].Cmdline, []string{"sleep", "60"}) || got[pid].PID != pid {
			t.Fatalf("resolve %d of a live process: %+v, %v", i, got, errs)
		}
	}
	if n := openFDs(t); n != base+1 {
		t.Errorf("%d descriptors open while one process is cached, want %d", n, base+1)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	held := openFDs(t) // the stat file, and no more pidfd
	got, errs := r.Resolve([]uint32{pid})
	if len(got) != 0 || len(errs) != 0 || len(r.cache) != 0 {
		t.Errorf("after exit: %v, %v, cache %v; want nothing", got, errs, keys(r.cache))
	}
	if n := openFDs(t); n != held-1 {
		t.Errorf("%d descriptors open after the process exited, want %d", n, held-1)
	}
}

// TestResolveClosesDropped checks that a PID NVML stops listing has its stat
// file closed, and that Resolve(nil) closes the rest and leaves the Reader
// usable.
// (Not parallel: it counts this process's descriptors.)
func TestResolveClosesDropped(t *testing.T) {
	root := t.TempDir()
	for pid := uint32(1); pid <= 5; pid++ {
		writeProc(t, root, pid, "python3", 1000, cgroupOf(uidA, cidA), "python3")
	}
	base := openFDs(t)
	r := New(Config{Root: root}, nil)
	if got, errs := r.Resolve([]uint32{1, 2, 3, 4, 5}); len(got) != 5 || len(errs) != 0 {
		t.Fatalf("Resolve: %v, %v", got, errs)
	}
	if n := openFDs(t); n != base+5 {
		t.Errorf("%d descriptors with 5 cached, want %d", n, base+5)
	}
	if got, _ := r.Resolve([]uint32{2, 4}); len(got) != 2 {
		t.Fatalf("Resolve: %v", got)
	}
	if n := openFDs(t); n != base+2 {
		t.Errorf("%d descriptors with 2 cached, want %d", n, base+2)
	}
	r.Resolve(nil)
	if n := openFDs(t); n != base {
		t.Errorf("%d descriptors after Resolve(nil), want %d", n, base)
	}
	if got, _ := r.Resolve([]uint32{3}); got[3].PodUID != uidA {
		t.Errorf("Resolve after Resolve(nil): %v", got)
	}
	r.Resolve(nil)
}

// TestAncestors: a vLLM tensor-parallel worker titles itself, and its model
// is on the API server two parents up, in the same container; the walk
// stops at the container runtime's shim, which is in another cgroup, and
// is not done for a process in no pod.
func TestAncestors(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	child := func(pid, ppid uint32, cgroup string, args ...string) {
		writeProc(t, root, pid, "proc", 1000, cgroup, args...)
		f := filepath.Join(root, strconv.FormatUint(uint64(pid), 10), "stat")
		stat := strings.Replace(statLine(pid, "proc", 1000), ") S 1 ", ") S "+strconv.FormatUint(uint64(ppid), 10)+" ", 1)
		if err := os.WriteFile(f, []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := cgroupOf(uidA, cidA)
	child(200, 1, "0::/system.slice/containerd.service\n", "containerd-shim-runc-v2")
	child(300, 200, a, "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2")
	child(400, 300, a, "VLLM::EngineCore")
	child(500, 400, a, "VLLM::Worker_TP1")
	child(600, 200, "0::/system.slice/leak.service\n", "VLLM::EngineCore")
	got, errs := New(Config{Root: root}, nil).Resolve([]uint32{500, 600})
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	want := [][]string{{"VLLM::EngineCore"}, {"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2"}}
	if !reflect.DeepEqual(got[500].Ancestors, want) {
		t.Errorf("ancestors of the worker %q, want %q", got[500].Ancestors, want)
	}
	if got[600].Ancestors != nil {
		t.Errorf("ancestors of a process in no pod %q, want none read", got[600].Ancestors)
	}
	if p, err := ParsePPID([]byte(statLine(7, "a) S 9 (b", 1))); err != nil || p != 1 {
		t.Errorf("ParsePPID = %d, %v; want 1 (after the last parenthesis)", p, err)
	}
}

// awaitCmdline waits, for up to 10 s, until /proc/<pid>/cmdline reads want.
func awaitCmdline(t *testing.T, pid uint32, want string) {
	t.Helper()
	path := fmt.Sprintf("/proc/%d/cmdline", pid)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && string(b) == want {
			return
		}
	}
	t.Fatalf("%s never read %q", path, want)
}
