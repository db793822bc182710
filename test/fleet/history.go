package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpuxray/gpuxray/collector/sim"
)

// HistoryConfig is how a node's history is replayed.
type HistoryConfig struct {
	// Poll is replay's --poll.interval: at most 20 s, the driver's ring of
	// samples, so that no sample is lost to a gap.
	Poll time.Duration
	// Scrape is replay's --scrape.interval, the history's resolution.
	Scrape time.Duration
	// Retention is replay's --retention: how long an ended allocation's
	// series stay, as on a node (the agent's default is 10m).
	Retention time.Duration
}

// importStats is what one replay brought into the engine.
type importStats struct {
	series, samples int64
	replay          time.Duration
	bytes           int64 // of the replay's exposition
}

// replayImport replays src's scenario file with `gpuxray replay` and
// imports it, with its timestamps, once under each identity, into the
// engine at vmAddr, with kube-state-metrics' series of the scenario's pods
// at the same scrapes. It writes them as a scraper would, by Prometheus
// remote write, with a staleness marker where a series goes. With omPath, the (renamed, shifted) exposition is also written
// there for `promtool tsdb create-blocks-from openmetrics`.
func replayImport(ctx context.Context, t Tools, dir string, src *Node, copies []identity, vmAddr string, c HistoryConfig, omPath string) (importStats, error) {
	var st importStats
	file := filepath.Join(dir, src.Name+".yaml")
	if err := os.WriteFile(file, src.YAML, 0o644); err != nil {
		return st, err
	}
	// A GPU in MIG mode on Hopper reads its instances' activity from GPM
	// once a poll: each reading covers the poll, which --sample.max-gap
	// must allow (the default, 2 s, is for NVML's 1/6 s samples).
	args := []string{t.Gpuxray, "replay", "--format=openmetrics",
		"--poll.interval=" + c.Poll.String(), "--sample.max-gap=" + (c.Poll + 5*time.Second).String(),
		"--scrape.interval=" + c.Scrape.String(), "--retention=" + c.Retention.String(), file}
	// Replays take what CPU the live agents leave: an agent whose polls
	// lag reads its rates off by the lag.
	if nice, err := exec.LookPath("nice"); err == nil {
		args = append([]string{nice, "-n", "19"}, args...)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return st, err
	}
	var om *bufio.Writer
	if omPath != "" {
		if len(copies) != 1 {
			return st, fmt.Errorf("fleet: an exposition for promtool is written for one identity, not %d", len(copies))
		}
		f, err := os.Create(omPath)
		if err != nil {
			return st, err
		}
		defer f.Close()
		om = bufio.NewWriterSize(f, 1<<20)
	}
	started := time.Now()
	if err := cmd.Start(); err != nil {
		return st, err
	}
	rw := &remoteWriter{ctx: ctx, url: "http://" + vmAddr + "/api/v1/write"}
	var buf []byte
	var n atomic.Int64
	counted := &countReader{r: stdout, n: &n}
	scrapeMS := c.Scrape.Milliseconds()
	endMS := src.Scenario.Start.Add(src.Scenario.Duration).UnixMilli()
	emit := func(s *series) error {
		for _, id := range copies {
			cs := id.apply(s)
			if err := rw.add(withStaleMarker(cs, scrapeMS, endMS+id.shiftMS)); err != nil {
				return err
			}
			if om != nil {
				buf = appendOMLines(buf[:0], cs)
				if _, err := om.Write(buf); err != nil {
					return err
				}
			}
			st.series++
			st.samples += int64(len(cs.ts))
		}
		return nil
	}
	var comment func([]byte) error
	if om != nil {
		comment = func(line []byte) error {
			if string(line) == "# EOF" {
				return nil // kube-state-metrics' families follow
			}
			_, err := om.Write(append(line, '\n'))
			return err
		}
	}
	rerr := readOM(counted, emit, comment)
	werr := cmd.Wait()
	st.replay = time.Since(started)
	st.bytes = n.Load()
	if rerr == nil && werr == nil {
		rerr = kubeStateHistory(src.Scenario, c.Scrape, func(s *series, typ string) error {
			if om != nil && typ != "" {
				if _, err := fmt.Fprintf(om, "# TYPE %s %s\n", s.name, typ); err != nil {
					return err
				}
			}
			return emit(s)
		})
	}
	if om != nil && rerr == nil {
		if _, err := om.WriteString("# EOF\n"); err != nil {
			rerr = err
		} else {
			rerr = om.Flush()
		}
	}
	if rerr == nil {
		rerr = rw.flush()
	}
	switch {
	case werr != nil:
		return st, fmt.Errorf("gpuxray replay %s: %v\n%s", src.Name, werr, stderr.String())
	case rerr != nil:
		return st, fmt.Errorf("importing the replay of %s: %w", src.Name, rerr)
	}
	return st, nil
}

type countReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// kubeStateHistory writes the series kube-state-metrics would have served
// for the scenario's pods (sim.Node.KubeState) at replay's scrapes: the
// start, every scrape interval, and the end. Series of one family come
// together, the family's first with its type.
func kubeStateHistory(sc *sim.Scenario, every time.Duration, each func(s *series, typ string) error) error {
	clock := sim.NewVirtualClock(sc.Start)
	node, err := sim.NewNode(sc, clock)
	if err != nil {
		return err
	}
	defer node.Close()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(node.KubeState()); err != nil {
		return err
	}
	type key struct{ family, labels string }
	byKey := map[key]*series{}
	end := sc.Start.Add(sc.Duration)
	for t := sc.Start; !t.After(end); t = t.Add(every) {
		clock.Set(t)
		mfs, err := reg.Gather()
		if err != nil {
			return err
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				ls := []label{{"instance", "kube-state-metrics"}, {"job", "kube-state-metrics"}}
				for _, lp := range m.GetLabel() {
					ls = append(ls, label{lp.GetName(), lp.GetValue()})
				}
				sort.Slice(ls, func(a, b int) bool { return ls[a].name < ls[b].name })
				var kb strings.Builder
				for _, l := range ls {
					kb.WriteString(l.name + "=" + l.value + ",")
				}
				k := key{mf.GetName(), kb.String()}
				s := byKey[k]
				if s == nil {
					s = &series{name: mf.GetName(), labels: ls}
					byKey[k] = s
				}
				s.ts = append(s.ts, t.UnixMilli())
				s.vals = append(s.vals, gaugeValue(m))
			}
		}
	}
	keys := make([]key, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(a, b int) bool {
		if keys[a].family != keys[b].family {
			return keys[a].family < keys[b].family
		}
		return keys[a].labels < keys[b].labels
	})
	for i, k := range keys {
		typ := ""
		if i == 0 || keys[i-1].family != k.family {
			typ = "gauge"
		}
		if err := each(byKey[k], typ); err != nil {
			return err
		}
	}
	return nil
}

func gaugeValue(m *dto.Metric) float64 {
	if g := m.GetGauge(); g != nil {
		return g.GetValue()
	}
	return m.GetUntyped().GetValue()
}

// forceFlush makes what VictoriaMetrics was sent searchable now.
func forceFlush(ctx context.Context, vmAddr string) error {
	code, b, err := httpGet(ctx, "http://"+vmAddr+"/internal/force_flush")
	if err == nil && code != 200 {
		err = fmt.Errorf("force_flush: HTTP %d: %s", code, b)
	}
	return err
}
