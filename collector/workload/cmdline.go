package workload

import (
	"net/url"
	"path"
	"regexp"
	"strings"
)

// ModelFromCmdline returns the model a GPU process serves or trains, read
// from its argument vector, or "" when the command line does not say.
//
// A command line can hold tokens (--api-key, --hf-token, HF_TOKEN=…, a URL
// with credentials), so the result is only ever the value of a flag that
// names a model, or the positional argument a server takes as its model;
// no other argument is read. The value is then reduced to a name: a URL
// loses its credentials, query and all but its last path element, a local
// path is cut to its last meaningful element, and anything that still does
// not look like a model name (characters outside [A-Za-z0-9._:/+-], a
// token's prefix such as hf_ or sk-) gives "". The result is at most
// MaxModelBytes long.
//
// What is recognised, most telling first:
//
//   - --served-model-name X (vLLM, SGLang, TGI): the name clients ask for,
//     and the model_name label of vLLM's own metrics; llama.cpp's --alias.
//   - vLLM: vllm serve X; python -m vllm.entrypoints.openai.api_server --model X.
//   - Hugging Face TGI: text-generation-launcher --model-id X, and its
//     shards' text-generation-server serve X.
//   - SGLang: python -m sglang.launch_server --model-path X.
//   - Triton: tritonserver --load-model X (explicit model control);
//     otherwise --model-repository DIR, whose model directories the command
//     line does not list: the repository's last meaningful path element
//     stands for them (/srv/llama-ensemble → llama-ensemble; a generic
//     /models gives ""). A Python backend's stub process
//     (triton_python_backend_stub /models/NAME/1/model.py …) gives NAME.
//   - llama.cpp: llama-server -m /models/x.gguf → x (also --model, -hf
//     org/repo, -mu URL, and shard suffixes -00001-of-00003 removed).
//   - Ollama: ollama run X → X. ollama serve loads models on request and
//     its runners are given a content-addressed blob (sha256-…): "".
//   - NVIDIA NIM: the launcher takes its model from the environment
//     (NIM_MODEL_NAME, NIM_MODEL_PROFILE), which is not on the command line
//     and is out of reach: "" unless an inner server is given --model. Set a
//     model label on the pod (DefaultModelKeys).
//   - torchrun, accelerate launch, deepspeed, python scripts: the usual
//     model flags of training scripts (--model_name_or_path, --model-name,
//     --model_path, --model_id, --base_model, --model, …).
//
// A Hugging Face id ("meta-llama/Llama-3.1-8B") is kept whole. A local path
// (/models/meta-llama/Llama-3.1-8B/) gives its last meaningful element
// ("Llama-3.1-8B"): the directories above it are as often a mount point or
// a team's folder as an organisation, so they are not guessed at. Skipped
// on the way up: trailing slashes, snapshot revisions (40 or 64 hex
// digits), version directories (digits only), weight files' extensions, and
// generic directory names (models, weights, checkpoints, snapshots, mnt,
// data, …). A Hugging Face cache directory models--org--name gives org/name.
//
// Processes that overwrite their argument vector with a title (vLLM's
// VLLM::EngineCore and VLLM::Worker_TP0, SGLang's sglang::scheduler)
// carry no model on their command line: "".
func ModelFromCmdline(args []string) string {
	args = unwrap(args)
	if len(args) == 0 {
		return ""
	}
	prog := path.Base(args[0])
	rest := args[1:]
	if isShell(prog) {
		return "" // sh -c "…": one string of shell, not parsed.
	}
	if pythonRE.MatchString(prog) {
		var ok bool
		if prog, rest, ok = pythonTarget(rest); !ok {
			return ""
		}
	}
	for _, v := range modelCandidates(prog, rest) {
		if m := normalize(v); m != "" {
			return m
		}
	}
	return ""
}

// servedNameFlags name the model as clients (and the server's own metrics)
// see it.
var servedNameFlags = []string{"--served-model-name", "--served_model_name"}

// modelFlags are the flags servers and training scripts take a model by,
// in the order they are believed.
var modelFlags = []string{
	"--model", "--model-id", "--model_id", "--model-path", "--model_path",
	"--model-name-or-path", "--model_name_or_path",
	"--pretrained-model-name-or-path", "--pretrained_model_name_or_path",
	"--model-name", "--model_name", "--base-model", "--base_model",
}

var (
	pythonRE = regexp.MustCompile(`^python[0-9.]*$`)
	envRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// modelCandidates returns, most telling first, the values prog's command
// line gives for its model. Each is the value of a model flag or a
// positional argument the program takes as its model, never another
// argument.
func modelCandidates(prog string, args []string) []string {
	var c []string
	add := func(v string, ok bool) {
		if ok {
			c = append(c, v)
		}
	}
	add(flagValue(args, servedNameFlags...))
	switch {
	case prog == "vllm", prog == "text-generation-server":
		// vllm serve MODEL; text-generation-server serve MODEL (TGI's shards).
		if len(args) > 1 && args[0] == "serve" && !strings.HasPrefix(args[1], "-") {
			c = append(c, args[1])
		}
	case prog == "ollama":
		if len(args) > 1 && args[0] == "run" && !strings.HasPrefix(args[1], "-") {
			c = append(c, args[1])
		}
	case prog == "tritonserver":
		if v, ok := flagValue(args, "--load-model", "--load_model"); ok && v != "*" {
			c = append(c, v)
		}
		add(flagValue(args, "--model-repository", "--model_repository", "--model-store", "--model_store"))
		return c
	case prog == "triton_python_backend_stub":
		if len(args) > 0 && strings.HasSuffix(args[0], ".py") && strings.Contains(args[0], "/") {
			c = append(c, path.Dir(args[0])+"/")
		}
		return c
	case isLlamaCpp(prog):
		add(flagValue(args, "-a", "--alias"))
		add(flagValue(args, "-m", "--model"))
		add(flagValue(args, "-hf", "-hfr", "--hf-repo"))
		add(flagValue(args, "-mu", "--model-url"))
		return c
	}
	for _, f := range modelFlags {
		add(flagValue(args, f))
	}
	return c
}

// flagValue returns the value of the first of flags found in args, given as
// "--flag value" or "--flag=value". A flag followed by another flag (or by
// nothing) has no value and is passed over.
func flagValue(args []string, flags ...string) (string, bool) {
	for _, f := range flags {
		for i, a := range args {
			if a == f {
				if i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") {
					return args[i+1], true
				}
				continue
			}
			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v, true
			}
		}
	}
	return "", false
}

// unwrap drops what runs a program without being it: environment
// assignments (HF_TOKEN=… — never read), env, nohup, tini and dumb-init.
func unwrap(args []string) []string {
	for len(args) > 0 {
		a := args[0]
		switch {
		case envRE.MatchString(a):
		case a == "--":
		default:
			switch path.Base(a) {
			case "env", "nohup", "tini", "dumb-init":
				if len(args) > 1 && strings.HasPrefix(args[1], "-") && args[1] != "--" {
					// env -i, tini -g, …: their options are not parsed;
					// the program is not found with certainty.
					return nil
				}
			default:
				return args
			}
		}
		args = args[1:]
	}
	return nil
}

func isShell(prog string) bool {
	switch prog {
	case "sh", "bash", "dash", "zsh", "ash", "busybox":
		return true
	}
	return false
}

// isLlamaCpp reports whether prog is one of llama.cpp's programs
// (llama-server, llama-cli, …), whose -m is the model file. Their names
// before mid-2024 (server, main) are too common to trust -m for.
func isLlamaCpp(prog string) bool { return strings.HasPrefix(prog, "llama-") }

// pythonTarget finds what a Python interpreter runs: a module (-m) or a
// script, and that program's arguments. -c code is not parsed.
func pythonTarget(args []string) (prog string, rest []string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-m" && i+1 < len(args):
			return moduleProg(args[i+1]), args[i+2:], true
		case strings.HasPrefix(a, "-m") && len(a) > 2 && !strings.HasPrefix(a, "--"):
			return moduleProg(a[2:]), args[i+1:], true
		case a == "-c" || strings.HasPrefix(a, "-c"):
			return "", nil, false
		case a == "-X" || a == "-W" || a == "--check-hash-based-pycs":
			i++ // an option that takes a value
		case a == "-" || !strings.HasPrefix(a, "-"):
			return path.Base(a), args[i+1:], true
		}
	}
	return "", nil, false
}

// moduleProg maps a Python module to the program it is: the modules that
// take a model positionally are given their command's name.
func moduleProg(module string) string {
	switch module {
	case "vllm", "vllm.entrypoints.cli.main":
		return "vllm"
	case "text_generation_server", "text_generation_server.cli":
		return "text-generation-server"
	}
	return module
}

// Reducing a value to a model name.

// validModelRE is what a model name may be made of: Hugging Face ids,
// Ollama tags (name:tag) and llama.cpp quantisations included.
var validModelRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._:/+-]*$`)

// secretPrefixes start tokens and keys (Hugging Face, OpenAI-style API
// keys, GitHub, GitLab, Slack, AWS access keys, JWTs); a value, or a path
// element, that is one of them followed by a token's worth of characters is
// not taken as a model name.
var secretPrefixes = []string{
	"hf_", "sk-", "sk_", "ghp_", "gho_", "ghs_", "ghu_", "github_pat_", "glpat-",
	"xoxb-", "xoxp-", "AKIA", "ASIA", "eyJ",
}

// tokenRE is what follows a secret prefix in a token: 16 or more characters
// of a base64url or hex alphabet (and the dots of a JWT).
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9_.+=-]{16,}`)

// genericDirs are directory names that say where weights are, not which.
var genericDirs = map[string]bool{
	"models": true, "model": true, "mnt": true, "data": true, "weights": true,
	"checkpoints": true, "checkpoint": true, "ckpt": true, "hub": true, "snapshots": true,
	"workspace": true, "tmp": true, "home": true, "root": true, "opt": true, "srv": true,
	"var": true, "cache": true, ".cache": true, "huggingface": true, "hf": true,
	"output": true, "outputs": true, "repository": true, "model-repository": true,
	"model_repository": true, "model-store": true, "model_store": true, "blobs": true,
	"volume": true, "volumes": true, "pvc": true, "storage": true, "shared": true,
	"local": true, "app": true, "share": true, "usr": true, "ollama": true, ".ollama": true,
	"nim": true, "triton": true, "gguf": true, "hf_home": true, "model-cache": true,
	"model_cache": true, "models-cache": true,
}

// weightExts are file extensions of model weights, dropped from a file's name.
var weightExts = []string{
	".gguf", ".ggml", ".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".onnx",
	".plan", ".engine", ".nemo", ".tflite", ".h5", ".keras", ".llamafile",
}

var (
	shardRE    = regexp.MustCompile(`-[0-9]{5}-of-[0-9]{5}$`)
	revisionRE = regexp.MustCompile(`^(?:[0-9a-f]{40}|[0-9a-f]{64})$`)
	digitsRE   = regexp.MustCompile(`^[0-9]+$`)
)

// normalize reduces one candidate value to a model name, or "".
func normalize(v string) string {
	v = strings.TrimSpace(v)
	if v == "" || hasSecretPrefix(v) {
		return ""
	}
	var name string
	switch {
	case strings.Contains(v, "://"):
		name = fromURL(v)
	case isPath(v):
		name = lastElement(v)
	default:
		name = v
	}
	name = strings.Trim(name, "/")
	if len(name) > MaxModelBytes {
		name = strings.TrimRight(name[:MaxModelBytes], "/")
	}
	if !validModelRE.MatchString(name) || strings.Contains(name, "//") {
		return ""
	}
	for _, e := range strings.Split(name, "/") {
		if e == "" || e == "." || e == ".." || hasSecretPrefix(e) {
			return ""
		}
	}
	return name
}

func hasSecretPrefix(s string) bool {
	for _, p := range secretPrefixes {
		if rest, ok := strings.CutPrefix(s, p); ok && tokenRE.MatchString(rest) {
			return true
		}
	}
	return false
}

// isPath reports whether v is a filesystem path rather than a Hugging Face
// id (org/name) or a bare name.
func isPath(v string) bool {
	switch {
	case strings.HasPrefix(v, "/"), strings.HasPrefix(v, "./"), strings.HasPrefix(v, "../"),
		strings.HasPrefix(v, "~"), v == ".", v == "..", strings.HasSuffix(v, "/"),
		strings.Count(v, "/") >= 2:
		return true
	}
	return hasWeightExt(v)
}

func hasWeightExt(v string) bool {
	for _, e := range weightExts {
		if strings.HasSuffix(strings.ToLower(v), e) {
			return true
		}
	}
	return false
}

// fromURL reduces a URL to a model name: hf://org/name (KServe's storage
// URI) to org/name, any other (s3://, gs://, https://, pvc://) to its last
// meaningful path element. Credentials, query and fragment are dropped.
func fromURL(v string) string {
	u, err := url.Parse(v)
	if err != nil {
		return ""
	}
	p := strings.Trim(u.Host+u.EscapedPath(), "/")
	if q, err := url.PathUnescape(p); err == nil {
		p = q
	}
	switch strings.ToLower(u.Scheme) {
	case "hf", "huggingface":
		if strings.Count(p, "/") <= 1 {
			return p
		}
	}
	if u.Path == "" || u.Path == "/" {
		return "" // a bucket or a host: no model in it
	}
	return lastElement(u.Path)
}

// lastElement returns the last meaningful element of path p (see
// ModelFromCmdline), or "".
func lastElement(p string) string {
	elems := strings.Split(p, "/")
	for i := len(elems) - 1; i >= 0; i-- {
		e := elems[i]
		if i == len(elems)-1 || isFileName(e) {
			e = stripWeightExt(e)
		}
		if e == "" || e == "." || e == ".." || strings.HasPrefix(e, "~") {
			continue
		}
		if strings.HasPrefix(e, "sha256-") || strings.HasPrefix(e, "sha256:") {
			return "" // a content-addressed blob (Ollama): no name to give
		}
		if org, name, ok := hfCacheDir(e); ok {
			return org + "/" + name
		}
		if revisionRE.MatchString(e) || digitsRE.MatchString(e) || genericDirs[strings.ToLower(e)] {
			continue
		}
		return e
	}
	return ""
}

func isFileName(e string) bool { return hasWeightExt(e) }

func stripWeightExt(e string) string {
	lower := strings.ToLower(e)
	for _, x := range weightExts {
		if strings.HasSuffix(lower, x) {
			e = e[:len(e)-len(x)]
			return shardRE.ReplaceAllString(e, "")
		}
	}
	if strings.HasSuffix(lower, ".py") {
		return ""
	}
	return e
}

// hfCacheDir decodes a Hugging Face hub cache directory, models--org--name.
func hfCacheDir(e string) (org, name string, ok bool) {
	rest, ok := strings.CutPrefix(e, "models--")
	if !ok {
		return "", "", false
	}
	org, name, ok = strings.Cut(rest, "--")
	if !ok || org == "" || name == "" {
		return "", "", false
	}
	return org, name, true
}
