package sim

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestParseEngineErrors(t *testing.T) {
	t.Parallel()
	p := "pods:\n  - namespace: a\n    name: p\n    devices: [\"gpu:0\"]\n    engine: "
	checkParseErrors(t, []parseErrorCase{
		{"no kind", head + p + "{kv_cache_usage: 0.1}\n", "t.yaml:9: pods[0].engine.kind: missing"},
		{"unknown kind", head + p + "{kind: triton}\n", `t.yaml:9: pods[0].engine.kind: "triton" is not one of vllm, sglang, tgi`},
		{"unknown key", head + p + "{kind: vllm, kv: 0.1}\n",
			"t.yaml:9: pods[0].engine.kv: unknown key; want one of kind, model, metrics, kv_cache_usage, tokens_per_second, requests_running, requests_waiting"},
		{"kv above 1", head + p + "{kind: vllm, kv_cache_usage: 1.5}\n", "t.yaml:9: pods[0].engine.kv_cache_usage: 1.5 is not a ratio between 0 and 1"},
		{"negative tokens", head + p + "{kind: sglang, tokens_per_second: -3}\n", "t.yaml:9: pods[0].engine.tokens_per_second: -3 is not a number of at least 0"},
		{"tokens not a number", head + p + "{kind: tgi, tokens_per_second: fast}\n", "t.yaml:9: pods[0].engine.tokens_per_second: fast is not a number of at least 0"},
		{"steps out of order", head + p + "{kind: vllm, tokens_per_second: [{at: 1h, value: 5}, {at: 30m, value: 1}]}\n",
			"t.yaml:9: pods[0].engine.tokens_per_second[1].at: 30m does not come after the previous step's 1h"},
		{"step after the end", head + p + "{kind: vllm, kv_cache_usage: [{at: 5h, value: 0.5}]}\n",
			"t.yaml:9: pods[0].engine.kv_cache_usage[0].at: 5h is after the scenario's end at 4h"},
		{"step without value", head + p + "{kind: vllm, kv_cache_usage: [{at: 1h}]}\n", "t.yaml:9: pods[0].engine.kv_cache_usage[0].value: missing"},
		{"metrics for sglang", head + p + "{kind: sglang, metrics: v0}\n", "t.yaml:9: pods[0].engine.metrics: only vllm has a choice of metrics"},
		{"metrics unknown", head + p + "{kind: vllm, metrics: v2}\n", `t.yaml:9: pods[0].engine.metrics: "v2" is not v1 or v0`},
		{"vllm shapes mixed", head + p + "{kind: vllm}\n  - {namespace: a, name: q, devices: [\"gpu:1\"], engine: {kind: vllm, metrics: v0}}\n",
			"t.yaml:10: pods[1].engine.metrics: v0 differs from pods[0]'s v1: one node's vLLM pods share one shape of metrics"},
	})
}

// enginesScenario: a vLLM pod from 10m to 2h whose load steps up at 1h, an
// SGLang pod and a TGI pod for the whole scenario.
const enginesScenario = `start: 2026-12-01T08:00:00Z
duration: 3h
node: n1
system: dgxh100
gpus: 3
pods:
  - namespace: chat
    name: llama-0
    cmdline: [vllm, serve, meta-llama/Llama-3.1-8B-Instruct]
    devices: ["gpu:0"]
    from: 10m
    to: 2h
    memory: 72GiB
    engine:
      kind: vllm
      kv_cache_usage: [{at: 10m, value: 0.1}, {at: 1h, value: 0.4}]
      tokens_per_second: [{at: 10m, value: 100}, {at: 1h, value: 300}]
      requests_running: 3
  - {namespace: chat, name: qwen-0, devices: ["gpu:1"], engine: {kind: sglang, model: Qwen/Qwen2.5-7B, kv_cache_usage: 0.25, tokens_per_second: 50, requests_waiting: 2}}
  - {namespace: chat, name: tgi-0, devices: ["gpu:2"], engine: {kind: tgi, kv_cache_usage: 0.3, tokens_per_second: 10}}
`

func TestEngineSeries(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(enginesScenario), "engines.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if e := sc.Pods[0].Engine; e.Model != "meta-llama/Llama-3.1-8B-Instruct" || e.Metrics != VLLMMetricsV1 {
		t.Fatalf("vLLM engine %+v", e)
	}
	if e := sc.Pods[2].Engine; e.Model != "tgi-0" || e.Metrics != "" {
		t.Fatalf("TGI engine %+v", e)
	}
	clock := NewVirtualClock(sc.Start)
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	// 50m at 100 tokens/s, then 30m at 300.
	clock.Set(sc.Start.Add(90 * time.Minute))
	vllm := `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="chat",pod="llama-0"} 840000
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="chat",pod="llama-0"} 0.4
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="chat",pod="llama-0"} 3
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct",namespace="chat",pod="llama-0"} 0
`
	if err := testutil.CollectAndCompare(n.Engines(EngineVLLM), strings.NewReader(vllm)); err != nil {
		t.Error(err)
	}
	if got := sc.EngineTokens(0, 90*time.Minute); got != 840000 {
		t.Errorf("EngineTokens = %g, want 840000", got)
	}
	sglang := `# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="Qwen/Qwen2.5-7B",namespace="chat",pod="qwen-0",pp_rank="0",tp_rank="0"} 50
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="Qwen/Qwen2.5-7B",namespace="chat",pod="qwen-0"} 270000
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B",namespace="chat",pod="qwen-0",pp_rank="0",tp_rank="0"} 2
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="Qwen/Qwen2.5-7B",namespace="chat",pod="qwen-0",pp_rank="0",tp_rank="0"} 0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{engine_type="unified",model_name="Qwen/Qwen2.5-7B",namespace="chat",pod="qwen-0",pp_rank="0",tp_rank="0"} 0.25
`
	if err := testutil.CollectAndCompare(n.Engines(EngineSGLang), strings.NewReader(sglang)); err != nil {
		t.Error(err)
	}
	// TGI: 54,000 tokens are 210 finished requests of 256 (53,760 tokens).
	gauges := `# HELP tgi_batch_current_max_tokens Maximum tokens for the current batch
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens{namespace="chat",pod="tgi-0"} 30000
# HELP tgi_batch_max_total_tokens Maximum amount of tokens in total.
# TYPE tgi_batch_max_total_tokens gauge
tgi_batch_max_total_tokens{namespace="chat",pod="tgi-0"} 100000
`
	if err := testutil.CollectAndCompare(n.Engines(EngineTGI), strings.NewReader(gauges), "tgi_batch_current_max_tokens", "tgi_batch_max_total_tokens"); err != nil {
		t.Error(err)
	}
	h := gatherOne(t, n.Engines(EngineTGI), "tgi_request_generated_tokens").GetHistogram()
	if h.GetSampleCount() != 210 || h.GetSampleSum() != 53760 || len(h.GetBucket()) != 100 {
		t.Errorf("tgi_request_generated_tokens count %d, sum %g, %d buckets", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()))
	}
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= TGITokensPerRequest {
			want = 210
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%g: %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}

	// Outside its pod's time an engine serves nothing.
	for _, at := range []time.Duration{5 * time.Minute, 2 * time.Hour} {
		clock.Set(sc.Start.Add(at))
		if c := testutil.CollectAndCount(n.Engines(EngineVLLM)); c != 0 {
			t.Errorf("at %s: %d vLLM series, want none", at, c)
		}
	}
}

// TestEngineV0: vLLM's V0 engine names its KV-cache usage
// vllm:gpu_cache_usage_perc and has no engine label.
func TestEngineV0(t *testing.T) {
	t.Parallel()
	sc, err := ParseScenario([]byte(head+"pods:\n  - {namespace: a, name: v, devices: [\"gpu:0\"], cmdline: [python, -m, vllm.entrypoints.openai.api_server, --model=facebook/opt-125m], engine: {kind: vllm, metrics: v0, kv_cache_usage: 0.5, tokens_per_second: 2}}\n"), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	clock := NewVirtualClock(sc.Start.Add(time.Minute))
	n, err := NewNode(sc, clock)
	if err != nil {
		t.Fatal(err)
	}
	want := `# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="facebook/opt-125m",namespace="a",pod="v"} 120
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="facebook/opt-125m",namespace="a",pod="v"} 0.5
`
	if err := testutil.CollectAndCompare(n.Engines(EngineVLLM), strings.NewReader(want), "vllm:generation_tokens_total", "vllm:gpu_cache_usage_perc"); err != nil {
		t.Error(err)
	}
}

func gatherOne(t *testing.T, c prometheus.Collector, name string) *dto.Metric {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0]
		}
	}
	t.Fatalf("no single %s", name)
	return nil
}
