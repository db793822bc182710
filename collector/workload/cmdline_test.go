package workload

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Secrets that appear in the command lines below; none may reach a result.
var secrets = []string{
	"sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345",
	"s3cr3t-pa55", "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI", "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
	"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "tok3n-value", "xyzzy-key",
}

// Real command lines, as /proc/<pid>/cmdline splits them.
var cmdlineTests = []struct {
	name string
	args []string
	want string
}{
	// vLLM
	{"vllm serve", []string{"vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--tensor-parallel-size", "2", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, "meta-llama/Llama-3.1-8B-Instruct"},
	{"vllm serve from its venv", []string{"/opt/venv/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--port", "8000"}, "Qwen/Qwen2.5-7B-Instruct"},
	{"vllm serve, api key first", []string{"vllm", "serve", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6", "--model", "mistralai/Mistral-7B-v0.3"}, "mistralai/Mistral-7B-v0.3"},
	{"vllm serve, only flags and a key", []string{"vllm", "serve", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, ""},
	{"vllm serve a local path", []string{"vllm", "serve", "/models/meta-llama/Llama-3.1-8B/", "--gpu-memory-utilization", "0.9"}, "Llama-3.1-8B"},
	{"vllm served-model-name wins", []string{"vllm", "serve", "/mnt/models", "--served-model-name", "llama3-chat", "llama3"}, "llama3-chat"},
	{"vllm on KServe without a served name", []string{"vllm", "serve", "/mnt/models", "--port", "8080"}, ""},
	{"vllm api_server module", []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "facebook/opt-125m", "--api-key=sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, "facebook/opt-125m"},
	{"vllm --model=", []string{"/usr/bin/python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model=google/gemma-2-9b-it", "--hf-token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, "google/gemma-2-9b-it"},
	{"vllm cli module", []string{"python", "-m", "vllm.entrypoints.cli.main", "serve", "ibm-granite/granite-3.1-8b-instruct"}, "ibm-granite/granite-3.1-8b-instruct"},
	{"vllm HF cache snapshot", []string{"vllm", "serve", "/root/.cache/huggingface/hub/models--meta-llama--Llama-3.2-1B/snapshots/4e20de362430cd3b72f300e6b0f18e50e7166e08/"}, "meta-llama/Llama-3.2-1B"},
	{"vllm engine core: title, no model", []string{"VLLM::EngineCore"}, ""},
	{"vllm tensor-parallel worker", []string{"VLLM::Worker_TP1"}, ""},
	{"env-style args before vllm", []string{"HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "VLLM_API_KEY=xyzzy-key", "vllm", "serve", "microsoft/phi-4"}, "microsoft/phi-4"},
	{"env then vllm", []string{"/usr/bin/env", "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "vllm", "serve", "microsoft/phi-4"}, "microsoft/phi-4"},
	{"model given as the api key's neighbour", []string{"vllm", "serve", "--model", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, ""},
	{"model flag at the end", []string{"vllm", "serve", "--api-key", "xyzzy-key", "--model"}, ""},

	// Hugging Face TGI
	{"tgi launcher", []string{"text-generation-launcher", "--model-id", "bigscience/bloom-560m", "--num-shard", "1", "--port", "80"}, "bigscience/bloom-560m"},
	{"tgi launcher =", []string{"text-generation-launcher", "--model-id=tiiuae/falcon-7b-instruct", "--quantize", "bitsandbytes"}, "tiiuae/falcon-7b-instruct"},
	{"tgi shard", []string{"/opt/conda/bin/python3.11", "/opt/conda/bin/text-generation-server", "serve", "HuggingFaceH4/zephyr-7b-beta", "--uds-path", "/tmp/text-generation-server", "--logger-level", "INFO", "--json-output"}, "HuggingFaceH4/zephyr-7b-beta"},
	{"tgi shard direct", []string{"text-generation-server", "serve", "/data/models--bigcode--starcoder2-15b/snapshots/46d44742909c90d1adb8e9b7dd96a5c2e2a0ecd5", "--sharded"}, "bigcode/starcoder2-15b"},

	// SGLang
	{"sglang", []string{"python3", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "--host", "0.0.0.0", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B"},
	{"sglang served name", []string{"python", "-m", "sglang.launch_server", "--model-path", "/weights/qwen", "--served-model-name", "qwen-prod"}, "qwen-prod"},
	{"sglang scheduler title", []string{"sglang::scheduler_TP0"}, ""},

	// Triton
	{"triton repository", []string{"tritonserver", "--model-repository=/srv/llama-ensemble", "--http-port=8000"}, "llama-ensemble"},
	{"triton generic repository", []string{"/opt/tritonserver/bin/tritonserver", "--model-repository", "/models", "--log-verbose=1"}, ""},
	{"triton repository on s3 with keys", []string{"tritonserver", "--model-repository=s3://AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI@bucket/triton/bert-repo"}, "bert-repo"},
	{"triton load-model", []string{"tritonserver", "--model-repository=/models", "--model-control-mode=explicit", "--load-model=whisper_large"}, "whisper_large"},
	{"triton load-model *", []string{"tritonserver", "--model-repository=/models/ensemble-prod", "--model-control-mode=explicit", "--load-model=*"}, "ensemble-prod"},
	{"triton python stub", []string{"/opt/tritonserver/backends/python/triton_python_backend_stub", "/models/preprocess/1/model.py", "triton_python_backend_shm_region_1", "1048576", "1048576", "12345", "/opt/tritonserver/backends/python", "336", "preprocess_0_0"}, "preprocess"},

	// llama.cpp
	{"llama-server -m", []string{"llama-server", "-m", "/models/mistral-7b-instruct-v0.2.Q4_K_M.gguf", "-c", "4096", "--api-key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, "mistral-7b-instruct-v0.2.Q4_K_M"},
	{"llama-server --model=", []string{"/app/llama-server", "--model=/models/x.gguf", "--host", "0.0.0.0"}, "x"},
	{"llama-server sharded gguf", []string{"llama-server", "-m", "/models/Meta-Llama-3.1-70B-Instruct-Q4_K_M-00001-of-00002.gguf"}, "Meta-Llama-3.1-70B-Instruct-Q4_K_M"},
	{"llama-server alias", []string{"llama-server", "-m", "/models/x.gguf", "--alias", "chat-small"}, "chat-small"},
	{"llama-server -hf", []string{"llama-server", "-hf", "ggml-org/gemma-3-1b-it-GGUF:Q4_K_M", "--hf-token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, "ggml-org/gemma-3-1b-it-GGUF:Q4_K_M"},
	{"llama-server -mu with credentials", []string{"llama-server", "-mu", "https://user:s3cr3t-pa55@models.example.com/gguf/phi-3-mini.gguf?token=tok3n-value"}, "phi-3-mini"},
	{"llama-server -mu huggingface resolve URL", []string{"llama-server", "-mu", "https://huggingface.co/TheBloke/Llama-2-7B-GGUF/resolve/main/llama-2-7b.Q4_K_M.gguf?download=true"}, "llama-2-7b.Q4_K_M"},

	// Ollama
	{"ollama run", []string{"ollama", "run", "llama3.1:8b"}, "llama3.1:8b"},
	{"ollama serve", []string{"/bin/ollama", "serve"}, ""},
	{"ollama runner: a blob", []string{"/usr/bin/ollama", "runner", "--model", "/root/.ollama/models/blobs/sha256-6a0746a1ec1aef3e7ec53868f220ff6e389f6f8ef87a01d77c96807de94ca2aa", "--ctx-size", "8192", "--port", "41915"}, ""},

	// NVIDIA NIM: the model is in the environment.
	{"nim launcher", []string{"/opt/nim/llm/.venv/bin/python3", "-m", "nim_llm_sdk.entrypoints.launch"}, ""},
	{"nim start script", []string{"/bin/bash", "/opt/nim/start_server.sh"}, ""},

	// Training launchers and scripts
	{"torchrun", []string{"torchrun", "--nproc_per_node=8", "--nnodes=2", "train.py", "--model_name_or_path", "meta-llama/Llama-3.1-8B", "--output_dir", "/ckpt", "--hub_token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, "meta-llama/Llama-3.1-8B"},
	{"torchrun worker", []string{"/usr/bin/python3", "-u", "train.py", "--model_name_or_path=/data/llama-3-8b", "--report_to", "wandb"}, "llama-3-8b"},
	{"torch.distributed.run", []string{"python", "-m", "torch.distributed.run", "--nproc_per_node", "4", "finetune.py", "--model-name", "EleutherAI/pythia-1b"}, "EleutherAI/pythia-1b"},
	{"accelerate", []string{"accelerate", "launch", "--config_file", "fsdp.yaml", "sft.py", "--model_name_or_path", "mistralai/Mistral-7B-v0.1", "--wandb_api_key", "xyzzy-key"}, "mistralai/Mistral-7B-v0.1"},
	{"deepspeed", []string{"deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "ds_z3.json", "--model_path", "/mnt/weights/falcon-40b/"}, "falcon-40b"},
	{"a script with --model", []string{"python3", "bench.py", "--model", "gpt2", "--token", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, "gpt2"},
	{"a script with no model flag", []string{"python3", "train.py", "--lr", "3e-4", "--api_key", "sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, ""},
	{"flag prefixes are not flags", []string{"vllm", "serve", "--model-loader-extra-config", "x", "--model-impl", "vllm"}, ""},

	// Refusals
	{"shell string", []string{"/bin/sh", "-c", "vllm serve meta-llama/Llama-3.1-8B --api-key sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, ""},
	{"python -c", []string{"python3", "-c", "import vllm; vllm.LLM('x', api_key='sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6')"}, ""},
	{"a token where the model goes", []string{"vllm", "serve", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, ""},
	{"an sk- key where the model goes", []string{"python", "x.py", "--model=sk-proj-4fT9xQ2mZ8vB1nK7wR3yL6"}, ""},
	{"a JWT where the model goes", []string{"python", "x.py", "--model", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig"}, ""},
	{"a token inside a path", []string{"llama-server", "-m", "/secrets/ghp_16C7e42F292c6912E7710c838347Ae178B4a"}, ""},
	{"spaces and shell in the model", []string{"python", "x.py", "--model", "a;curl -H Authorization:s3cr3t-pa55"}, ""},
	{"a bucket and nothing more", []string{"python", "x.py", "--model", "s3://user:s3cr3t-pa55@bucket"}, ""},
	{"hf:// storage URI", []string{"python", "x.py", "--model", "hf://meta-llama/Llama-3.2-3B"}, "meta-llama/Llama-3.2-3B"},
	{"empty", nil, ""},
	{"only env", []string{"HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345"}, ""},
	{"env with options", []string{"env", "-i", "HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz012345", "vllm", "serve", "x/y"}, ""},
	{"too long a name is cut", []string{"vllm", "serve", "org/" + strings.Repeat("m", 200)}, "org/" + strings.Repeat("m", MaxModelBytes-4)},
}

func TestModelFromCmdline(t *testing.T) {
	t.Parallel()
	for _, tt := range cmdlineTests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ModelFromCmdline(tt.args); got != tt.want {
				t.Errorf("ModelFromCmdline(%q) = %q, want %q", tt.args, got, tt.want)
			}
		})
	}
}

// TestModelFromCmdlineNoSecret checks every result of the table, and of the
// table's command lines with their arguments rotated and reversed (so that a
// secret stands where a model would), for every secret.
func TestModelFromCmdlineNoSecret(t *testing.T) {
	t.Parallel()
	check := func(args []string) {
		t.Helper()
		got := ModelFromCmdline(args)
		for _, s := range secrets {
			for _, part := range []string{s, s[:len(s)/2+1], s[len(s)/2:]} {
				if len(part) >= 6 && strings.Contains(got, part) {
					t.Errorf("ModelFromCmdline(%q) = %q, which holds secret %q", args, got, part)
				}
			}
		}
		if !validOutput(got) {
			t.Errorf("ModelFromCmdline(%q) = %q, which breaks the output rules", args, got)
		}
	}
	for _, tt := range cmdlineTests {
		check(tt.args)
		for r := 1; r < len(tt.args); r++ {
			check(append(append([]string{}, tt.args[r:]...), tt.args[:r]...))
		}
		rev := append([]string{}, tt.args...)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		check(rev)
	}
}

// validOutput is what every result must be: empty, or a model name of at
// most MaxModelBytes bytes of [A-Za-z0-9._:/+-], with no URL, no empty or
// dot path element, and no leading dash.
func validOutput(s string) bool {
	if s == "" {
		return true
	}
	if len(s) > MaxModelBytes || !utf8.ValidString(s) || strings.Contains(s, "://") || strings.HasPrefix(s, "-") {
		return false
	}
	for _, c := range []byte(s) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:/+-", c) >= 0
		if !ok {
			return false
		}
	}
	for _, e := range strings.Split(s, "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}

func FuzzModelFromCmdline(f *testing.F) {
	for _, tt := range cmdlineTests {
		f.Add(strings.Join(tt.args, "\x00"))
	}
	f.Fuzz(func(t *testing.T, cmdline string) {
		args := strings.Split(cmdline, "\x00")
		got := ModelFromCmdline(args)
		if !validOutput(got) {
			t.Fatalf("ModelFromCmdline(%q) = %q, which breaks the output rules", args, got)
		}
		if got != "" && !strings.Contains(cmdline, strings.Split(got, "/")[0]) && !strings.Contains(cmdline, "models--") && !strings.Contains(cmdline, "%") {
			t.Fatalf("ModelFromCmdline(%q) = %q, which is not from the command line", args, got)
		}
	})
}
