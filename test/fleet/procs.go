package fleet

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Tools are the external programs a fleet run drives, by path.
type Tools struct {
	// VictoriaMetrics, VMAgent and VMAlert are the single-node engine, its
	// scraper and its rule evaluator (Debian's victoria-metrics package
	// ships all three).
	VictoriaMetrics, VMAgent, VMAlert string
	// Alertmanager is Prometheus' Alertmanager (prometheus-alertmanager).
	Alertmanager string
	// Prometheus and Promtool set the same history in Prometheus, to
	// compare the two engines' answers.
	Prometheus, Promtool string
	// Gpuxray is the gpuxray binary: `replay` writes the history, `report`
	// reads it back.
	Gpuxray string
}

// ToolNames are the programs Tools holds, by the name each is installed as.
var ToolNames = []string{"victoria-metrics", "vmagent", "vmalert", "prometheus-alertmanager", "prometheus", "promtool"}

// FindTools looks the engine's programs up on PATH; the first missing one
// is an error naming it.
func FindTools(gpuxray string) (Tools, error) {
	t := Tools{Gpuxray: gpuxray}
	for _, f := range []struct {
		name string
		dst  *string
	}{{"victoria-metrics", &t.VictoriaMetrics}, {"vmagent", &t.VMAgent}, {"vmalert", &t.VMAlert},
		{"prometheus-alertmanager", &t.Alertmanager}, {"prometheus", &t.Prometheus}, {"promtool", &t.Promtool}} {
		p, err := exec.LookPath(f.name)
		if err != nil {
			return t, fmt.Errorf("%s is not installed (.ci/run shows how to install it)", f.name)
		}
		*f.dst = p
	}
	return t, nil
}

// proc is a child process in a process group of its own, so that stopping
// it stops whatever it started too. Its output goes to a log file in the
// run's directory.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// procs are the children of a run; Stop ends them all.
type procs struct {
	mu   sync.Mutex
	list []*proc
	dir  string
}

// start runs bin with args, its output in dir/name.log. The child is killed
// if this process dies first (Pdeathsig), and Stop kills its whole group.
func (ps *procs) start(name, bin string, args ...string) (*proc, error) {
	logPath := filepath.Join(ps.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = ps.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	ps.mu.Lock()
	ps.list = append(ps.list, p)
	ps.mu.Unlock()
	return p, nil
}

// exited reports whether the process has ended, and how.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	if done, _ := p.exited(); done {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// stopNamed ends the children named in names, as Stop would.
func (ps *procs) stopNamed(names ...string) {
	ps.mu.Lock()
	var stop, keep []*proc
	for _, p := range ps.list {
		if slices.Contains(names, p.name) {
			stop = append(stop, p)
		} else {
			keep = append(keep, p)
		}
	}
	ps.list = keep
	ps.mu.Unlock()
	for _, p := range stop {
		p.stop(5 * time.Second)
	}
}

// Stop ends every child, last started first.
func (ps *procs) Stop() {
	ps.mu.Lock()
	list := ps.list
	ps.list = nil
	ps.mu.Unlock()
	for i := len(list) - 1; i >= 0; i-- {
		list[i].stop(10 * time.Second)
	}
}

// freeAddr returns a loopback address with a port nobody listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitHTTP polls url until it answers 200, the process exits, or d passes.
func waitHTTP(ctx context.Context, p *proc, url string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		code, _, err := httpGet(ctx, url)
		if err == nil && code == http.StatusOK {
			return nil
		}
		if done, werr := p.exited(); done {
			return fmt.Errorf("%s exited (%v) before %s answered:\n%s", p.name, werr, url, p.tail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer %s within %s (last: %d %v):\n%s", p.name, url, d, code, err, p.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

var httpClient = &http.Client{Timeout: 5 * time.Minute}

// requestTimeout bounds one request of the checks to an engine. A query
// over every series of 100 nodes took more than 30 s on 2 cores at a load
// of 30, with the live agents, vmalert and the history's replays beside
// it: the checks wait as a user's dashboard would not, but they judge.
const requestTimeout = 2 * time.Minute

func httpGet(ctx context.Context, url string) (int, []byte, error) {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
