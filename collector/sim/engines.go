package sim

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Inference engines a simulated pod may run (a pod's `engine: {kind: …}`).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTGI    = "tgi"
)

// EngineKinds are the engines the simulator serves, each at
// /simulate/<kind> of `agent --simulate` and as job="<kind>" in a replay.
var EngineKinds = []string{EngineVLLM, EngineSGLang, EngineTGI}

// vLLM's two shapes of metrics (an engine's `metrics:` key).
const (
	// VLLMMetricsV1 is vLLM's V1 engine: labels model_name and engine,
	// KV-cache usage as vllm:kv_cache_usage_perc.
	VLLMMetricsV1 = "v1"
	// VLLMMetricsV0 is vLLM's V0 engine (vLLM 0.8 and before): label
	// model_name only, KV-cache usage as vllm:gpu_cache_usage_perc.
	VLLMMetricsV0 = "v0"
)

// TGI's fixed figures in the simulation: the token budget of a batch that
// the launcher sizes to the memory left after the weights
// (--max-batch-total-tokens), the largest request (--max-total-tokens, whose
// hundredths are the buckets of tgi_request_generated_tokens), and the
// tokens each simulated request generates.
const (
	TGIMaxBatchTotalTokens = 100000
	TGIMaxTotalTokens      = 2048
	TGITokensPerRequest    = 256
)

// Engine is the inference server a pod runs, and what its own metrics say
// over time: KV-cache usage (0..1 of the cache the engine reserved),
// generated tokens per second, and requests running and waiting. Each is a
// step list in scenario times, 0 before its first step.
type Engine struct {
	Kind string
	// Model is the served model name (vLLM's --served-model-name): the
	// file's `model`, else the pod's --model argument or `vllm serve
	// MODEL`, else the pod's name.
	Model string
	// Metrics is vLLM's shape, VLLMMetricsV1 (the default) or VLLMMetricsV0.
	Metrics         string
	KVCacheUsage    []Step
	TokensPerSecond []Step
	Running         []Step
	Waiting         []Step
}

// engine checks a pod's engine; pod's From, To and Cmdline are already
// known, and s holds the pods before it.
func (d *validator) engine(p string, es *EngineSpec, pod *Pod, s *Scenario) (*Engine, error) {
	if err := d.required(p, "kind"); err != nil {
		return nil, err
	}
	e := &Engine{Kind: es.Kind, Metrics: es.Metrics, Model: es.Model}
	if !slices.Contains(EngineKinds, e.Kind) {
		return nil, d.errf(p+".kind", "%q is not one of %s", e.Kind, strings.Join(EngineKinds, ", "))
	}
	if d.has(p + ".metrics") {
		if e.Kind != EngineVLLM {
			return nil, d.errf(p+".metrics", "only vllm has a choice of metrics")
		}
		if e.Metrics != VLLMMetricsV1 && e.Metrics != VLLMMetricsV0 {
			return nil, d.errf(p+".metrics", "%q is not %s or %s", e.Metrics, VLLMMetricsV1, VLLMMetricsV0)
		}
	} else if e.Kind == EngineVLLM {
		e.Metrics = VLLMMetricsV1
	}
	// One family of the node's /simulate/vllm carries one label set.
	for j, o := range s.Pods {
		if e.Kind == EngineVLLM && o.Engine != nil && o.Engine.Kind == EngineVLLM && o.Engine.Metrics != e.Metrics {
			return nil, d.errAt(d.first(p+".metrics", p+".kind"), p+".metrics", "%s differs from pods[%d]'s %s: one node's vLLM pods share one shape of metrics", e.Metrics, j, o.Engine.Metrics)
		}
	}
	if !d.has(p + ".model") {
		e.Model = servedModel(pod)
	}
	var err error
	if e.KVCacheUsage, err = levels(d, p+".kv_cache_usage", es.KVCacheUsage, pod.From, s.Duration); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		key string
		src *Levels[Level]
		dst *[]Step
	}{{"tokens_per_second", es.TokensPerSecond, &e.TokensPerSecond}, {"requests_running", es.Running, &e.Running}, {"requests_waiting", es.Waiting, &e.Waiting}} {
		if *f.dst, err = levels(d, p+"."+f.key, f.src, pod.From, s.Duration); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// levels checks a figure that is one value from the pod's start (from), or
// a list of {at, value} steps in ascending scenario times.
func levels[T Ratio | Level](d *validator, path string, l *Levels[T], from, total time.Duration) ([]Step, error) {
	if l == nil {
		return nil, nil
	}
	if l.Value != nil {
		return []Step{{At: from, Value: float64(*l.Value)}}, nil
	}
	out := make([]Step, 0, len(l.List))
	for i, it := range l.List {
		ip := fmt.Sprintf("%s[%d]", path, i)
		if err := d.required(ip, "at", "value"); err != nil {
			return nil, err
		}
		at, err := d.offset(ip+".at", it.At, total)
		if err != nil {
			return nil, err
		}
		if i > 0 && at <= out[i-1].At {
			return nil, d.errf(ip+".at", "%s does not come after the previous step's %s", fmtDur(at), fmtDur(out[i-1].At))
		}
		out = append(out, Step{At: at, Value: float64(it.Value)})
	}
	return out, nil
}

// servedModel is the model name vLLM serves when --served-model-name is
// not given: its --model argument (or `vllm serve MODEL`'s positional one);
// the pod's name when the command line names none.
func servedModel(p *Pod) string {
	// vLLM V1's GPU process titles itself (VLLM::EngineCore); its parent,
	// the API server, has the command line.
	for _, args := range [][]string{p.Cmdline, p.ParentCmdline} {
		for i, a := range args {
			switch {
			case strings.HasPrefix(a, "--model="):
				return strings.TrimPrefix(a, "--model=")
			case a == "--model" && i+1 < len(args):
				return args[i+1]
			case a == "serve" && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-"):
				return args[i+1]
			}
		}
	}
	return p.Name
}

// engineSeries are an engine's figures as series of scenario time, 0
// outside the pod's [From, To).
type engineSeries struct{ kv, tokens, running, waiting series }

func (s *Scenario) engineSeries(pod int) engineSeries {
	p := s.Pods[pod]
	within := func(steps []Step) series {
		raw := stepSeries(steps)
		return combine([]time.Duration{p.From, p.To}, []series{raw}, func(t time.Duration) float64 {
			if t < p.From || t >= p.To {
				return 0
			}
			return raw.value(t)
		})
	}
	e := p.Engine
	return engineSeries{kv: within(e.KVCacheUsage), tokens: within(e.TokensPerSecond), running: within(e.Running), waiting: within(e.Waiting)}
}

// EngineTokens is how many tokens pod's engine generated over [From, t),
// as its counter reads at scenario time t: 0 for a pod without an engine.
func (s *Scenario) EngineTokens(pod int, t time.Duration) float64 {
	if s.Pods[pod].Engine == nil {
		return 0
	}
	return s.engineSeries(pod).tokens.integral(0, t)
}

// Engines returns the series the inference engines of kind on the node's
// pods serve at the clock's now, each with the pod's namespace and pod
// labels, as a scrape of the pods by a pod-discovering Prometheus would
// store them (docs/report.md's scrape configuration). A pod's engine is
// there only within its [From, To). `agent --simulate` serves them at
// /simulate/<kind>; docs/simulator.md cites each series' source.
func (n *Node) Engines(kind string) prometheus.Collector {
	return engineState{n: n, kind: kind}
}

// engineState is unchecked (it describes nothing): vLLM's V0 and V1 pods
// carry different label sets (checkEngines keeps one shape a node).
type engineState struct {
	n    *Node
	kind string
}

func (engineState) Describe(chan<- *prometheus.Desc) {}

func (e engineState) Collect(ch chan<- prometheus.Metric) {
	sc := e.n.sc
	t := e.n.clock.Now().Sub(sc.Start)
	for i, p := range sc.Pods {
		if p.Engine == nil || p.Engine.Kind != e.kind || t < p.From || t >= p.To {
			continue
		}
		es := sc.engineSeries(i)
		f := engineFigures{kv: es.kv.value(t), tokens: es.tokens.integral(0, t), rate: es.tokens.value(t),
			running: math.Round(es.running.value(t)), waiting: math.Round(es.waiting.value(t))}
		switch p.Engine.Kind {
		case EngineVLLM:
			vllmMetrics(ch, p, f)
		case EngineSGLang:
			sglangMetrics(ch, p, f)
		case EngineTGI:
			tgiMetrics(ch, p, f)
		}
	}
}

// engineFigures are an engine's figures at one time.
type engineFigures struct{ kv, tokens, rate, running, waiting float64 }

// podLabels are the labels a pod-discovering scrape adds (namespace, pod).
var podLabels = []string{"namespace", "pod"}

func engineDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(slices.Clone(podLabels), labels...), nil)
}

// vLLM's series (vllm/v1/metrics/loggers.py; V0: vllm/engine/metrics.py).
var (
	vllmRunning    = engineDesc("vllm:num_requests_running", "Number of requests in model execution batches.", "model_name", "engine")
	vllmWaiting    = engineDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "model_name", "engine")
	vllmKV         = engineDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", "model_name", "engine")
	vllmGeneration = engineDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", "model_name", "engine")
	vllmV0Running  = engineDesc("vllm:num_requests_running", "Number of requests currently running on GPU.", "model_name")
	vllmV0Waiting  = engineDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "model_name")
	vllmV0KV       = engineDesc("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", "model_name")
	vllmV0Gen      = engineDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", "model_name")
)

func vllmMetrics(ch chan<- prometheus.Metric, p Pod, f engineFigures) {
	g := func(d *prometheus.Desc, t prometheus.ValueType, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, append([]string{p.Namespace, p.Name}, lv...)...)
	}
	if p.Engine.Metrics == VLLMMetricsV0 {
		g(vllmV0Running, prometheus.GaugeValue, f.running, p.Engine.Model)
		g(vllmV0Waiting, prometheus.GaugeValue, f.waiting, p.Engine.Model)
		g(vllmV0KV, prometheus.GaugeValue, f.kv, p.Engine.Model)
		g(vllmV0Gen, prometheus.CounterValue, f.tokens, p.Engine.Model)
		return
	}
	// One engine (data parallelism 1): engine="0".
	g(vllmRunning, prometheus.GaugeValue, f.running, p.Engine.Model, "0")
	g(vllmWaiting, prometheus.GaugeValue, f.waiting, p.Engine.Model, "0")
	g(vllmKV, prometheus.GaugeValue, f.kv, p.Engine.Model, "0")
	g(vllmGeneration, prometheus.CounterValue, f.tokens, p.Engine.Model, "0")
}

// SGLang's series (python/sglang/srt/metrics/collector.py): the scheduler's
// carry model_name, engine_type, tp_rank and pp_rank; the tokenizer's
// model_name.
var (
	sglangLabels     = []string{"model_name", "engine_type", "tp_rank", "pp_rank"}
	sglangRunning    = engineDesc("sglang:num_running_reqs", "The number of running requests.", sglangLabels...)
	sglangQueue      = engineDesc("sglang:num_queue_reqs", "The number of requests in the waiting queue.", sglangLabels...)
	sglangTokenUsage = engineDesc("sglang:token_usage", "The token usage.", sglangLabels...)
	sglangThroughput = engineDesc("sglang:gen_throughput", "The generation throughput (token/s).", sglangLabels...)
	sglangGeneration = engineDesc("sglang:generation_tokens_total", "Number of generation tokens processed.", "model_name")
)

func sglangMetrics(ch chan<- prometheus.Metric, p Pod, f engineFigures) {
	sched := []string{p.Namespace, p.Name, p.Engine.Model, "unified", "0", "0"}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, sched...)
	}
	g(sglangRunning, f.running)
	g(sglangQueue, f.waiting)
	g(sglangTokenUsage, f.kv)
	g(sglangThroughput, f.rate)
	ch <- prometheus.MustNewConstMetric(sglangGeneration, prometheus.CounterValue, f.tokens, p.Namespace, p.Name, p.Engine.Model)
}

// TGI's series (router/src/server.rs, backends/v3): no model label; the
// batch's token budget and its use; generated tokens only as a histogram
// of finished requests.
var (
	tgiBatchSize      = engineDesc("tgi_batch_current_size", "Current batch size")
	tgiQueueSize      = engineDesc("tgi_queue_size", "Current queue size")
	tgiBatchMaxTokens = engineDesc("tgi_batch_current_max_tokens", "Maximum tokens for the current batch")
	tgiMaxTotalTokens = engineDesc("tgi_batch_max_total_tokens", "Maximum amount of tokens in total.")
	tgiGenerated      = engineDesc("tgi_request_generated_tokens", "Generated tokens per request")
)

// tgiBuckets are TGI's buckets of tgi_request_generated_tokens: hundredths
// of --max-total-tokens.
var tgiBuckets = func() []float64 {
	out := make([]float64, 100)
	for i := range out {
		out[i] = float64(TGIMaxTotalTokens) / 100 * float64(i+1)
	}
	return out
}()

func tgiMetrics(ch chan<- prometheus.Metric, p Pod, f engineFigures) {
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, p.Namespace, p.Name)
	}
	g(tgiBatchSize, f.running)
	g(tgiQueueSize, f.waiting)
	g(tgiBatchMaxTokens, math.Round(f.kv*TGIMaxBatchTotalTokens))
	g(tgiMaxTotalTokens, TGIMaxBatchTotalTokens)
	// A request's tokens count when it finishes.
	requests := math.Floor(f.tokens / TGITokensPerRequest)
	buckets := make(map[float64]uint64, len(tgiBuckets))
	for _, b := range tgiBuckets {
		if b >= TGITokensPerRequest {
			buckets[b] = uint64(requests)
		} else {
			buckets[b] = 0
		}
	}
	ch <- prometheus.MustNewConstHistogram(tgiGenerated, uint64(requests), requests*TGITokensPerRequest, buckets, p.Namespace, p.Name)
}
