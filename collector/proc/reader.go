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
)

// Reader resolves host PIDs through a proc filesystem. It caches each PID's
// answer with the process's start time, so a PID the kernel hands to a new
// process is read afresh. It is safe for concurrent use.
type Reader struct {
	root   string
	logger *zap.Logger

	mu    sync.Mutex
	cache map[uint32]entry
}

// entry is a resolved PID and the start time of the process it was read from.
type entry struct {
	start uint64
	info  collector.ProcessInfo
}

// New returns a Reader of cfg.Root; cfg should have passed Validate. A nil
// logger logs nothing.
func New(cfg Config, logger *zap.Logger) *Reader {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Reader{root: cfg.Root, logger: logger, cache: map[uint32]entry{}}
}

// Resolve returns what /proc says of each PID: pod UID and container ID (empty
// for a process in no pod) and command line. A PID whose process has exited
// is left out without an error; any other failure leaves the PID out and is
// returned as a *collector.SourceError (source "proc", reason "read" or
// "parse"). Cached PIDs not in pids are forgotten, so the cache holds only
// the GPU processes of the latest call.
func (r *Reader) Resolve(pids []uint32) (map[uint32]collector.ProcessInfo, []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[uint32]collector.ProcessInfo, len(pids))
	next := make(map[uint32]entry, len(pids))
	var errs []error
	for _, pid := range pids {
		if _, done := next[pid]; done {
			continue
		}
		e, ok, err := r.resolve(pid)
		if err != nil {
			errs = append(errs, err)
		}
		if !ok {
			continue
		}
		next[pid] = e
		out[pid] = e.info
	}
	r.cache = next
	return out, errs
}

// resolve answers one PID from the cache or from /proc; ok is false when the
// process is gone or could not be read.
func (r *Reader) resolve(pid uint32) (entry, bool, error) {
	start, err := r.startTime(pid)
	if err != nil {
		return entry{}, false, quiet(err)
	}
	if e, hit := r.cache[pid]; hit && e.start == start {
		return e, true, nil
	}
	info, err := r.read(pid)
	if err != nil {
		return entry{}, false, quiet(err)
	}
	// The process may have exited and its PID been reused between the stat
	// read and the others: read stat again and trust only a stable answer.
	again, err := r.startTime(pid)
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
	return entry{start: start, info: info}, true, nil
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

// startTime reads field 22 of /proc/<pid>/stat, the process's start time in
// clock ticks since boot.
func (r *Reader) startTime(pid uint32) (uint64, error) {
	data, err := r.readFile(pid, "stat", maxStatBytes)
	if err != nil {
		return 0, err
	}
	start, err := ParseStartTime(data)
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
	return info, nil
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
	// ESRCH: the process exited after the file was opened.
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return nil, errGone
	}
	return nil, collector.NewSourceError(collector.SourceProc, "read", fmt.Errorf("pid %d %s: %w", pid, name, err))
}

// ParseStartTime returns field 22 of a /proc/<pid>/stat line, starttime.
// Field 2, comm, is in parentheses and may itself hold spaces and
// parentheses, so fields are counted from the last ')'.
func ParseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no ')' after comm")
	}
	// Fields 3 onwards follow ") "; starttime is the 20th of them.
	fields := bytes.Fields(stat[i+1:])
	const idx = 22 - 3
	if len(fields) <= idx {
		return 0, fmt.Errorf("stat: %d fields after comm, want at least %d", len(fields), idx+1)
	}
	v, err := strconv.ParseUint(string(fields[idx]), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: starttime %q is not a number", fields[idx])
	}
	return v, nil
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
