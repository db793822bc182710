#!/usr/bin/env bash
# Prepares issue #10's real-GPU check so that it is ONE device run: builds
# TestRealGPU as a linux/amd64 test binary (the device machine has no Go),
# runs the dry run on the simulated driver and load.py --dry-run here as a
# smoke check, and prints the device call to make. Run from anywhere:
#   test/gpu/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
export CGO_CFLAGS=-Wno-deprecated-declarations CGO_ENABLED=1 GOOS=linux GOARCH=amd64
bin=test/gpu/gpucheck.test

echo "== build $bin"
go test -c -trimpath -ldflags='-s -w' -o "$bin" ./test/gpu
size=$(stat -c %s "$bin")
echo "$bin: $((size / 1024 / 1024)) MiB ($size bytes)"
if [ "$size" -gt $((50 * 1024 * 1024)) ]; then
	echo "the binary is over 50 MiB: too big to carry" >&2
	exit 1
fi
# A cgo binary needs the device machine's glibc to be at least the newest
# symbol version it uses.
if command -v objdump >/dev/null; then
	echo "needs glibc: $(objdump -T "$bin" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)"
fi

echo "== the binary: TestRealGPU skips without -gpu; the dry run passes"
"./$bin" -test.run 'TestRealGPU|TestDryRunOnSimulator|TestAnalyzeTinyGPM' -test.v 2>&1 |
	grep -E '^(=== RUN|--- |PASS|FAIL|ok)|result:|needs a GPU'

echo "== rehearsal: TestRealGPU's path (subprocess, wall clock, truth file) on the simulated driver"
echo "   (its targets are reported, not asserted: the dry load's phases do not follow the simulated pattern, so FAIL lines are expected)"
"./$bin" -test.run TestRehearsal -test.v -gpu.rehearse -gpu.load test/gpu/load.py 2>&1 |
	grep -E '^(--- |PASS|FAIL|ok)|result:|phase|busy |idle |duty |tiny |pair |sample period|ring|sample clock|per-process|index vs'

echo "== load.py: compiles, and --dry-run writes its truth"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -c 'import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)' test/gpu/load.py "$tmp/load.pyc"
python3 test/gpu/load.py --dry-run --phase-seconds 5 --out "$tmp/truth.jsonl" 2>&1
python3 - "$tmp/truth.jsonl" <<'EOF'
import json, sys
phases = [json.loads(l) for l in open(sys.argv[1])]
assert [p["phase"] for p in phases] == ["busy", "idle", "duty", "tiny", "pair"], phases
assert phases[4]["busy_pid"] and phases[4]["spin_pid"], phases[4]
for p in phases:
    assert p["end"] > p["start"], p
duty = phases[2]
assert abs(duty["busy_s"] - 0.2 * (duty["end"] - duty["start"])) < 0.15, duty
print("truth ok:", ", ".join("%s %.2fs" % (p["phase"], p["end"] - p["start"]) for p in phases))
EOF

cat <<'EOF'

== the device call (the `run` tool), ~3 min of device time; timeout leaves room for one rerun
carry: ["test/gpu/gpucheck.test"]
timeout_s: 300
command:
EOF
cat <<'EOF'
set -o pipefail; mkdir -p "$OUT"; (nvidia-smi; nvidia-smi -q -d CLOCK,PERFORMANCE,COMPUTE) > "$OUT/nvidia-smi.txt" 2>&1; (uname -a; ldd --version | head -1; python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())') > "$OUT/env.txt" 2>&1; ./test/gpu/gpucheck.test -test.run TestRealGPU -test.v -test.timeout 285s -gpu -gpu.python python3 -gpu.load test/gpu/load.py -gpu.phase-seconds 25 -gpu.load-timeout 230s -gpu.out "$OUT" 2>&1 | tee "$OUT/test.log" | tail -40; cat "$OUT/driver.txt"
EOF
