package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
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
// engine at vmAddr, with the cluster's series of the scenario's pods that
// replay writes at the same scrapes (job="kube-state-metrics"). It writes them as a scraper would, by Prometheus
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
				return nil // written once, after every copy
			}
			_, err := om.Write(append(line, '\n'))
			return err
		}
	}
	rerr := readOM(counted, emit, comment)
	werr := cmd.Wait()
	st.replay = time.Since(started)
	st.bytes = n.Load()
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

// forceFlush makes what VictoriaMetrics was sent searchable now.
func forceFlush(ctx context.Context, vmAddr string) error {
	code, b, err := httpGet(ctx, "http://"+vmAddr+"/internal/force_flush")
	if err == nil && code != 200 {
		err = fmt.Errorf("force_flush: HTTP %d: %s", code, b)
	}
	return err
}
