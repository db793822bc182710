// Package proc maps the host PIDs NVML reports to the pods and containers
// they run in, from the host's /proc/<pid>/cgroup, and reads their command
// lines. Nothing here is ever logged or exported verbatim: a command line can
// hold secrets.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	"go.uber.org/zap"

	"github.com/gpuxray/gpuxray/collector"
	"github.com/gpuxray/gpuxray/internal/procstat"
)

const (
	// MaxCmdlineBytes is how much of a command line is read; the rest is
	// dropped. Kernels allow megabytes, and a model name sits near the front.
	MaxCmdlineBytes = 64 << 10
	// MaxCmdlineArgs is how many arguments of a command line are kept.
	MaxCmdlineArgs = 256
	// maxCgroupBytes bounds a cgroup read: one line per v1 hierarchy.
	maxCgroupBytes = 64 << 10
	// maxStatBytes bounds a stat read: comm is at most 64 bytes and the
	// 50-odd numeric fields fit easily.
	maxStatBytes = 4 << 10
	// MaxAncestors is how many parents of a GPU process are read, nearest
	// first, while they run in its container: vLLM's engine core runs
	// under its API server, a tensor-parallel worker under the engine core.
	MaxAncestors = 3
)

// Reader resolves host PIDs through a proc filesystem. It caches each PID's
// answer with the process's start time, so a PID the kernel hands to a new
// process is read afresh. It is safe for concurrent use.
//
// A cached PID keeps its /proc/<pid>/stat open: checking a live process
// each poll is then one pread and one fstat instead of a path lookup, open,
// read and close. On procfs the open file stays bound to the process it was
// opened for: once that process exits, reads fail with ESRCH, even if the PID
// has been reused. On a plain directory tree (a fixture, the simulator) a
// removed file shows as a link count of zero.
type Reader struct {
	root   string
	logger *zap.Logger
	// procfs is set when root is a proc filesystem, where a read of an
	// exited process's stat fails: its check needs no fstat.
	procfs bool

	mu    sync.Mutex
	cache map[uint32]entry
	// next becomes the cache at the end of a Resolve, and out is its
	// answer: both are reused from call to call.
	next map[uint32]entry
	out  map[uint32]collector.ProcessInfo
	buf  []byte // stat reads, reused
}

// entry is a resolved PID, the start time of the process it was read from,
// and that process's stat file, held open.
type entry struct {
	start uint64
	info  collector.ProcessInfo
	stat  *os.File
}

// New returns a Reader of cfg.Root; cfg should have passed Validate. A nil
// logger logs nothing.
func New(cfg Config, logger *zap.Logger) *Reader {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Reader{root: cfg.Root, logger: logger, procfs: isProcfs(cfg.Root), cache: map[uint32]entry{}, next: map[uint32]entry{},
		out: map[uint32]collector.ProcessInfo{}, buf: make([]byte, maxStatBytes)}
}

// procSuperMagic is the f_type statfs(2) gives a proc filesystem.
const procSuperMagic = 0x9fa0

func isProcfs(root string) bool {
	var st syscall.Statfs_t
	return syscall.Statfs(root, &st) == nil && st.Type == procSuperMagic
}

// Resolve returns what /proc says of each PID: pod UID and container ID (empty
// for a process in no pod) and command line. A PID whose process has exited
// is left out without an error; any other failure leaves the PID out and is
// returned as a *collector.SourceError (source "proc", reason "read" or
// "parse"). Cached PIDs not in pids are forgotten, and their stat files
// closed, so the cache holds only the GPU processes of the latest call
// (Resolve(nil) closes them all). The map returned is the Reader's, valid
// until the next call: a poll resolves its PIDs once and allocates no map.
func (r *Reader) Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, next := r.out, r.next
	clear(out)
	clear(next)
	var errs []error
	for _, pid := range pids {
		if _, done := next[pid]; done {
			continue
		}
		e, ok, err := r.resolve(pid)
		delete(r.cache, pid) // its file is now e's, or closed
		if err != nil {
			errs = append(errs, err)
		}
		if !ok {
			continue
		}
		next[pid] = e
		out[pid] = e.info
	}
	for _, e := range r.cache { // PIDs NVML no longer lists
		e.stat.Close()
	}
	r.cache, r.next = next, r.cache
	return out, errs
}

// resolve answers one PID from the cache or from /proc; ok is false when the
// process is gone or could not be read. The cache entry of pid, if any, is
// either carried into the answer or closed.
func (r *Reader) resolve(pid uint32) (entry, bool, error) {
	if e, hit := r.cache[pid]; hit {
		start, err := r.heldStartTime(pid, e.stat)
		if err == nil && start == e.start {
			if len(e.info.Cmdline) > 0 {
				return e, true, nil
			}
			// An empty command line was read mid-exec (or from a zombie):
			// exec keeps the PID and start time, so read the process again
			// until it names itself, or its model would be lost for life.
			again, ok, err := r.resolveOpen(pid, e.stat)
			if !ok {
				e.stat.Close()
			}
			return again, ok, err
		}
		// Exited, replaced or unreadable: start again from the path.
		e.stat.Close()
	}
	f, err := os.Open(r.path(pid, "stat"))
	if err != nil {
		return entry{}, false, quiet(r.readError(pid, "stat", err))
	}
	e, ok, err := r.resolveOpen(pid, f)
	if !ok {
		f.Close()
	}
	return e, ok, err
}

// resolveOpen reads pid afresh, its stat file open as f.
func (r *Reader) resolveOpen(pid uint32, f *os.File) (entry, bool, error) {
	start, err := r.heldStartTime(pid, f)
	if err != nil {
		return entry{}, false, quiet(err)
	}
	info, err := r.read(pid)
	if err != nil {
		return entry{}, false, quiet(err)
	}
	// The process may have exited and its PID been reused between the stat
	// read and the others: read stat again and trust only a stable answer.
	again, err := r.heldStartTime(pid, f)
	if err != nil {
		return entry{}, false, quiet(err)
	}
	if again != start {
		r.logger.Debug("process replaced while reading it", zap.Uint32("pid", pid))
		return entry{}, false, nil
	}
	if info.PodUID == "" {
		r.logger.Debug("GPU process in no pod", zap.Uint32("pid", pid))
	}
	info.StartTime = start
	return entry{start: start, info: info, stat: f}, true, nil
}

// errGone is a process that exited: NVML listed it a moment ago, so that is
// news, not a failure.
var errGone = errors.New("process exited")

// quiet drops errGone.
func quiet(err error) error {
	if errors.Is(err, errGone) {
		return nil
	}
	return err
}

func (r *Reader) path(pid uint32, file string) string {
	return filepath.Join(r.root, strconv.FormatUint(uint64(pid), 10), file)
}

// heldStartTime reads field 22 of the open /proc/<pid>/stat f, the
// process's start time in clock ticks since boot; errGone when the process
// has exited (ESRCH on procfs, an unlinked file elsewhere).
func (r *Reader) heldStartTime(pid uint32, f *os.File) (uint64, error) {
	// One pread, and elsewhere than on procfs one fstat, straight to the
	// kernel: os.File.ReadAt would read again to find the end of file, and
	// Stat would allocate.
	fd := int(f.Fd())
	n, err := syscall.Pread(fd, r.buf, 0)
	if err == nil && n == len(r.buf) {
		err = fmt.Errorf("longer than %d bytes", len(r.buf))
	}
	if err == nil && !r.procfs {
		var st syscall.Stat_t
		if err = syscall.Fstat(fd, &st); err == nil && st.Nlink == 0 {
			return 0, errGone
		}
	}
	if err != nil {
		return 0, r.readError(pid, "stat", err)
	}
	start, err := ParseStartTime(r.buf[:n])
	if err != nil {
		return 0, collector.NewSourceError(collector.SourceProc, "parse", fmt.Errorf("pid %d: %w", pid, err))
	}
	return start, nil
}

// read reads the cgroup and command line of pid.
func (r *Reader) read(pid uint32) (collector.ProcessInfo, error) {
	info := collector.ProcessInfo{PID: pid}
	cg, err := r.readFile(pid, "cgroup", maxCgroupBytes)
	if err != nil {
		return info, err
	}
	info.PodUID, info.ContainerID, _ = ParseCgroup(string(cg))
	cmd, err := r.readFile(pid, "cmdline", MaxCmdlineBytes)
	if err != nil {
		return info, err
	}
	info.Cmdline = SplitCmdline(cmd)
	if info.PodUID != "" {
		info.Ancestors = r.ancestors(pid, cg)
	}
	return info, nil
}

// ancestors reads the command lines of pid's parents whose cgroup is
// cgroup (the same container), nearest first, at most MaxAncestors. It is
// best effort: a parent that cannot be read ends the walk, uncounted, as
// the process's own answer stands without it.
func (r *Reader) ancestors(pid uint32, cgroup []byte) [][]string {
	var out [][]string
	for range MaxAncestors {
		stat, err := r.readFile(pid, "stat", maxStatBytes)
		if err != nil {
			break
		}
		ppid, err := ParsePPID(stat)
		if err != nil || ppid <= 1 {
			break
		}
		cg, err := r.readFile(ppid, "cgroup", maxCgroupBytes)
		if err != nil || !bytes.Equal(cg, cgroup) {
			break
		}
		cmd, err := r.readFile(ppid, "cmdline", MaxCmdlineBytes)
		if err != nil {
			break
		}
		out = append(out, SplitCmdline(cmd))
		pid = ppid
	}
	return out
}

// readFile reads at most limit bytes of /proc/<pid>/<name>; errGone when
// the process has exited.
func (r *Reader) readFile(pid uint32, name string, limit int64) ([]byte, error) {
	f, err := os.Open(r.path(pid, name))
	if err == nil {
		var data []byte
		data, err = io.ReadAll(io.LimitReader(f, limit))
		f.Close()
		if err == nil {
			return data, nil
		}
	}
	return nil, r.readError(pid, name, err)
}

// readError is errGone for a process that has exited (no such file, or
// ESRCH once the file was open), a read SourceError otherwise.
func (r *Reader) readError(pid uint32, name string, err error) error {
	if errors.Is(err, errGone) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return errGone
	}
	return collector.NewSourceError(collector.SourceProc, "read", fmt.Errorf("pid %d %s: %w", pid, name, err))
}

// ParsePPID returns field 4 of a /proc/<pid>/stat line, the parent's PID.
func ParsePPID(stat []byte) (uint32, error) {
	rest, err := procstat.AfterComm(stat)
	if err != nil {
		return 0, err
	}
	k := 0
	for f := range bytes.FieldsSeq(rest) {
		if k == 1 { // after state
			v, err := strconv.ParseUint(string(f), 10, 32)
			if err != nil {
				return 0, fmt.Errorf("stat: ppid %q is not a PID", f)
			}
			return uint32(v), nil
		}
		k++
	}
	return 0, errors.New("stat: no ppid after comm")
}

// ParseStartTime returns field 22 of a /proc/<pid>/stat line, starttime.
func ParseStartTime(stat []byte) (uint64, error) {
	rest, err := procstat.AfterComm(stat)
	if err != nil {
		return 0, err
	}
	// starttime is the 20th field after comm.
	const idx = 22 - 3
	k := 0
	for f := range bytes.FieldsSeq(rest) {
		if k == idx {
			v, err := strconv.ParseUint(string(f), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("stat: starttime %q is not a number", f)
			}
			return v, nil
		}
		k++
	}
	return 0, fmt.Errorf("stat: %d fields after comm, want at least %d", k, idx+1)
}

// SplitCmdline splits a /proc/<pid>/cmdline (NUL-separated arguments, the
// last one NUL-terminated) into at most MaxCmdlineArgs arguments.
func SplitCmdline(data []byte) []string {
	data = bytes.TrimSuffix(data, []byte{0})
	if len(data) == 0 {
		return nil
	}
	parts := bytes.SplitN(data, []byte{0}, MaxCmdlineArgs+1)
	n := min(len(parts), MaxCmdlineArgs)
	args := make([]string, n)
	for i := range n {
		args[i] = string(parts[i])
	}
	return args
}
