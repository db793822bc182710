package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"
)

// startVM starts a single-node VictoriaMetrics with its data in dir, its
// query limits at their defaults. Retention is a century so that a replayed
// week is kept, and the response cache is off because history is imported
// behind the live data (VictoriaMetrics' own advice for backfilling).
func startVM(ctx context.Context, ps *procs, t Tools, name, dir string, extra ...string) (addr string, p *proc, err error) {
	if addr, err = freeAddr(); err != nil {
		return "", nil, err
	}
	p, err = ps.start(name, t.VictoriaMetrics, append([]string{
		"-storageDataPath=" + dir,
		"-httpListenAddr=" + addr,
		"-retentionPeriod=100y",
		"-search.disableCache",
		"-loggerLevel=WARN",
	}, extra...)...)
	if err != nil {
		return "", nil, err
	}
	return addr, p, waitHTTP(ctx, p, "http://"+addr+"/health", 60*time.Second)
}

// scrapeConfig is the shards' configuration: the agents from a file_sd
// file, each target's node name relabelled from the file's __fleet_node
// label as a PodMonitor relabels __meta_kubernetes_pod_node_name, and the
// cluster's kube-state-metrics shards.
func scrapeConfig(targetsFile string, ksmAddrs []string, every time.Duration) string {
	ksm, _ := json.Marshal(ksmAddrs)
	return fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: gpuxray
    file_sd_configs:
      - files: [%[2]q]
    relabel_configs:
      - source_labels: [__fleet_node]
        target_label: node
  - job_name: kube-state-metrics
    honor_labels: true
    static_configs:
      - targets: %[3]s
`, every, targetsFile, ksm)
}

// writeTargets writes a file_sd file of the agents: one target each, with
// its node name.
func writeTargets(path string, targets map[string]string) error {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	groups := make([]group, 0, len(names))
	for _, n := range names {
		groups = append(groups, group{Targets: []string{targets[n]}, Labels: map[string]string{"__fleet_node": n}})
	}
	b, err := json.MarshalIndent(groups, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// shardName is the name of the i-th vmagent shard's process.
func shardName(i int) string { return fmt.Sprintf("vmagent-%d", i) }

// startShards starts n vmagents as one scraping cluster
// (-promscrape.cluster.*): each scrapes its share of the targets and
// remote-writes to the engine.
func startShards(ctx context.Context, ps *procs, t Tools, dir, config, vmAddr string, n int) ([]string, error) {
	cfg := filepath.Join(dir, "scrape.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return nil, err
	}
	var addrs []string
	for i := 0; i < n; i++ {
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		p, err := ps.start(shardName(i), t.VMAgent,
			"-promscrape.config="+cfg,
			"-promscrape.cluster.membersCount="+fmt.Sprint(n),
			"-promscrape.cluster.memberNum="+fmt.Sprint(i),
			"-promscrape.cluster.replicationFactor=1",
			"-promscrape.fileSDCheckInterval=1s",
			"-remoteWrite.url=http://"+vmAddr+"/api/v1/write",
			"-remoteWrite.tmpDataPath="+filepath.Join(dir, fmt.Sprintf("vmagent-%d-queue", i)),
			"-httpListenAddr="+addr,
			"-loggerLevel=WARN",
		)
		if err != nil {
			return nil, err
		}
		if err := waitHTTP(ctx, p, "http://"+addr+"/health", 60*time.Second); err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}
	return addrs, nil
}

// startVMAlert evaluates the rule file against the engine, writes the
// recording rules' results (and the alerts' state) back into it, and sends
// alerts to Alertmanager.
func startVMAlert(ctx context.Context, ps *procs, t Tools, rules, vmAddr, amAddr string, every time.Duration) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	p, err := ps.start("vmalert", t.VMAlert,
		"-rule="+rules,
		"-datasource.url=http://"+vmAddr,
		"-remoteWrite.url=http://"+vmAddr,
		"-remoteRead.url=http://"+vmAddr,
		"-notifier.url=http://"+amAddr,
		"-evaluationInterval="+every.String(),
		"-remoteWrite.flushInterval=1s",
		"-httpListenAddr="+addr,
		"-loggerLevel=WARN",
	)
	if err != nil {
		return "", err
	}
	return addr, waitHTTP(ctx, p, "http://"+addr+"/health", 60*time.Second)
}

// startAlertmanager starts Alertmanager without clustering, routing every
// alert at once to the webhook at hookURL, one notification per alert.
func startAlertmanager(ctx context.Context, ps *procs, t Tools, dir, hookURL string) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`route:
  receiver: fleet
  group_by: ['...']
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: fleet
    webhook_configs:
      - url: %q
        send_resolved: true
`, hookURL)), 0o644); err != nil {
		return "", err
	}
	p, err := ps.start("alertmanager", t.Alertmanager,
		"--config.file="+cfg,
		"--web.listen-address="+addr,
		"--storage.path="+filepath.Join(dir, "alertmanager"),
		"--cluster.listen-address=",
		"--log.level=warn",
	)
	if err != nil {
		return "", err
	}
	return addr, waitHTTP(ctx, p, "http://"+addr+"/-/ready", 60*time.Second)
}

// startPrometheus serves the TSDB in data with an empty configuration.
func startPrometheus(ctx context.Context, ps *procs, t Tools, dir, data string) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte("global: {}\n"), 0o644); err != nil {
		return "", err
	}
	p, err := ps.start("prometheus", t.Prometheus,
		"--config.file="+cfg,
		"--storage.tsdb.path="+data,
		"--storage.tsdb.retention.time=100y",
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	if err != nil {
		return "", err
	}
	return addr, waitHTTP(ctx, p, "http://"+addr+"/-/ready", 60*time.Second)
}

// Notification is one alert as Alertmanager's webhook delivered it.
type Notification struct {
	Status   string            `json:"status"`
	Labels   map[string]string `json:"labels"`
	StartsAt time.Time         `json:"startsAt"`
	// Received is when the webhook got it.
	Received time.Time `json:"-"`
}

// webhook is the receiver Alertmanager notifies: an HTTP server on
// loopback that keeps every alert it is sent.
type webhook struct {
	srv *http.Server
	url string

	mu     sync.Mutex
	alerts []Notification
}

func startWebhook() (*webhook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &webhook{url: "http://" + ln.Addr().String() + "/alerts"}
	w.srv = &http.Server{Handler: http.HandlerFunc(w.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = w.srv.Serve(ln) }()
	return w, nil
}

func (w *webhook) serve(rw http.ResponseWriter, r *http.Request) {
	var msg struct {
		Version string         `json:"version"`
		Alerts  []Notification `json:"alerts"`
	}
	b, err := io.ReadAll(r.Body)
	if err == nil {
		err = json.Unmarshal(b, &msg)
	}
	if err != nil || msg.Version != "4" {
		http.Error(rw, fmt.Sprintf("not an Alertmanager webhook message (version %q): %v", msg.Version, err), http.StatusBadRequest)
		return
	}
	now := time.Now()
	w.mu.Lock()
	for _, a := range msg.Alerts {
		a.Received = now
		w.alerts = append(w.alerts, a)
	}
	w.mu.Unlock()
}

// received returns the notifications so far.
func (w *webhook) received() []Notification {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Notification(nil), w.alerts...)
}

func (w *webhook) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = w.srv.Shutdown(ctx)
}

// promResponse is the Prometheus HTTP API's envelope.
type promResponse struct {
	Status    string          `json:"status"`
	ErrorType string          `json:"errorType"`
	Error     string          `json:"error"`
	Data      json.RawMessage `json:"data"`
}

// apiGet reads a Prometheus-compatible API endpoint's data.
func apiGet(ctx context.Context, addr, path string, into any) error {
	code, b, err := httpGet(ctx, "http://"+addr+path)
	if err != nil {
		return err
	}
	var r promResponse
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("GET %s: HTTP %d: %w: %.300s", path, code, err, b)
	}
	if r.Status != "success" {
		return fmt.Errorf("GET %s: %s: %s", path, r.ErrorType, r.Error)
	}
	return json.Unmarshal(r.Data, into)
}

// vector is an instant query's result.
type vector []struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// matrix is a range query's result.
type matrix []struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// query runs an instant (path from queryPath) or range query (from
// queryRangePath), its result into v or m.
func query(ctx context.Context, addr, path string, into any) error {
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := apiGet(ctx, addr, path, &data); err != nil {
		return err
	}
	return json.Unmarshal(data.Result, into)
}

func sampleValue(v any) float64 {
	s, _ := v.(string)
	var f float64
	fmt.Sscan(s, &f)
	return f
}

func sampleTime(v any) time.Time {
	f, _ := v.(float64)
	return time.UnixMilli(int64(f*1000 + 0.5)).UTC()
}

// queryPath is /api/v1/query for q at t. nocache=1 asks VictoriaMetrics
// to answer at t even within its -search.latencyOffset of now (it moves
// such a query 30 s back otherwise); Prometheus ignores it.
func queryPath(q string, t time.Time) string {
	v := "/api/v1/query?nocache=1&query=" + url.QueryEscape(q)
	if !t.IsZero() {
		v += fmt.Sprintf("&time=%.3f", float64(t.UnixMilli())/1000)
	}
	return v
}

func queryRangePath(q string, start, end time.Time, step time.Duration) string {
	return fmt.Sprintf("/api/v1/query_range?nocache=1&query=%s&start=%d&end=%d&step=%d",
		url.QueryEscape(q), start.Unix(), end.Unix(), int(step.Seconds()))
}
