#!/usr/bin/env python3
"""A GPU load whose truth is known, for test/gpu's TestRealGPU (issue #10).

Runs four phases on GPU 0, one after the other, and writes one JSON line per
phase to --out when the phase ends:

  {"phase": "busy", "start": <unix s>, "end": <unix s>, ...}

busy   large matmuls back to back: NVML's utilization ~100%, idle ~0.
idle   nothing runs, 8 GiB of device memory held (allocated before the phase).
duty   a 20% duty cycle: a burst of ~100 ms of matmuls every 500 ms. Each
       burst is timed with CUDA events around its kernels; the line carries
       the bursts [[start, end], ...] (Unix seconds; start is when the burst was
       launched, end = start + its CUDA-event time) and busy_s, their sum.
tiny   one tiny kernel at a time, then synchronize, in a loop: a single
       thread spinning (torch.cuda._sleep) or a one-element add. NVML's
       utilization ("a kernel was running") reads high; GPM SM activity
       (fraction of SMs with a warp resident) stays near zero.
pair   two processes at once (issue #26): this one runs matmuls back to
       back, a second (started at the beginning, --spinner) spins one block
       of one thread; the line carries busy_pid and spin_pid, so that the
       driver probes can count each PID's per-process entries.

--dry-run imports no torch and only sleeps through the phases, writing the
same lines (with a synthetic duty cycle), so that the format can be checked
where there is no GPU.
"""

import argparse
import json
import os
import subprocess
import sys
import time

BURST_S = 0.1  # busy part of a duty cycle
PERIOD_S = 0.5  # duty cycle period
HOLD_BYTES = 8 << 30  # memory held from the idle phase on
PHASES = ("busy", "idle", "duty", "tiny", "pair")


def log(msg):
    print("load.py: " + msg, file=sys.stderr, flush=True)


class Writer:
    def __init__(self, path):
        self.f = open(path, "w", encoding="utf-8")

    def phase(self, rec):
        self.f.write(json.dumps(rec, sort_keys=True) + "\n")
        self.f.flush()
        log("%s %.3f..%.3f (%.2fs)" % (rec["phase"], rec["start"], rec["end"], rec["end"] - rec["start"]))

    def close(self):
        self.f.close()


def sleep_until(t):
    while True:
        d = t - time.time()
        if d <= 0:
            return
        time.sleep(min(d, 0.05))


def dry_run(args, w):
    """Sleeps through the phases and writes the same lines."""
    for name in PHASES:
        start = time.time()
        end = start + args.phase_seconds
        rec = {"phase": name, "start": start}
        if name == "duty":
            bursts = []
            t = start
            while t + BURST_S <= end:
                bursts.append([t, t + BURST_S])
                t += PERIOD_S
            rec["bursts"] = bursts
            rec["busy_s"] = sum(b - a for a, b in bursts)
            rec["period_s"], rec["burst_s"] = PERIOD_S, BURST_S
        if name == "tiny":
            rec["kernel"] = "dry-run"
        if name == "pair":
            rec["busy_pid"], rec["spin_pid"] = os.getpid(), os.getpid() + 1
        sleep_until(end)
        rec["end"] = time.time()
        rec["dry_run"] = True
        w.phase(rec)


def spinner(args):
    """The pair phase's second process: initialises CUDA, says ready, waits
    for a line on stdin, then spins one block for --phase-seconds."""
    import torch  # noqa: PLC0415 - only on the GPU machine

    torch.cuda.set_device(0)
    torch.cuda._sleep(1000)
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.readline()
    end = time.time() + args.phase_seconds
    while time.time() < end:
        torch.cuda._sleep(args.sleep_cycles)
        torch.cuda.synchronize()


def real_run(args, w):
    import torch  # noqa: PLC0415 - only on the GPU machine

    # The pair phase's spinner starts now: its torch import and CUDA
    # context take seconds, which the phases before it hide.
    spin = subprocess.Popen([sys.executable, __file__, "--spinner", "--phase-seconds", str(args.phase_seconds),
                             "--sleep-cycles", str(args.sleep_cycles)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    n = args.matrix
    a = torch.randn(n, n, device=dev, dtype=torch.float16)
    b = torch.randn(n, n, device=dev, dtype=torch.float16)
    c = torch.empty(n, n, device=dev, dtype=torch.float16)
    # Warm up (cuBLAS handle, kernel selection) outside every phase.
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    log("GPU %s, torch %s, CUDA %s" % (torch.cuda.get_device_name(dev), torch.__version__, torch.version.cuda))

    # busy: matmuls back to back, synchronizing every 20 so the queue stays
    # short and the phase ends on time. Also measures one matmul's time.
    start = time.time()
    end = start + args.phase_seconds
    count = 0
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu_ms = 0.0
    while time.time() < end:
        e0.record()
        for _ in range(20):
            torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        gpu_ms += e0.elapsed_time(e1)
        count += 20
    per_mm = gpu_ms / 1000.0 / count
    w.phase({"phase": "busy", "start": start, "end": time.time(), "matmuls": count, "matmul_s": per_mm, "matrix": n})

    # idle: hold memory, run nothing. The allocation (and the kernel that
    # touches it) happen before the phase starts.
    hold = torch.empty(HOLD_BYTES, dtype=torch.uint8, device=dev)
    hold.fill_(1)
    torch.cuda.synchronize()
    start = time.time()
    sleep_until(start + args.phase_seconds)
    w.phase({"phase": "idle", "start": start, "end": time.time(), "held_bytes": HOLD_BYTES,
             "memory_allocated": torch.cuda.memory_allocated(dev)})

    # duty: a burst of k matmuls (~BURST_S) every PERIOD_S.
    k = max(1, round(BURST_S / per_mm))
    start = time.time()
    end = start + args.phase_seconds
    bursts = []
    t = start
    while t + BURST_S <= end:
        sleep_until(t)
        launched = time.time()
        e0.record()
        for _ in range(k):
            torch.matmul(a, b, out=c)
        e1.record()
        e1.synchronize()
        busy = e0.elapsed_time(e1) / 1000.0
        bursts.append([launched, launched + busy])
        t += PERIOD_S
    sleep_until(end)
    w.phase({"phase": "duty", "start": start, "end": time.time(), "bursts": bursts,
             "busy_s": sum(e - s for s, e in bursts), "period_s": PERIOD_S, "burst_s": BURST_S,
             "matmuls_per_burst": k})

    # tiny: one tiny kernel at a time.
    x = torch.zeros(1, device=dev)
    kernel = args.tiny_kernel
    if kernel == "sleep" and not hasattr(torch.cuda, "_sleep"):
        kernel = "add"
    start = time.time()
    end = start + args.phase_seconds
    launches = 0
    while time.time() < end:
        if kernel == "sleep":
            torch.cuda._sleep(args.sleep_cycles)  # one thread of one block spins
        else:
            x.add_(1)
        torch.cuda.synchronize()
        launches += 1
    w.phase({"phase": "tiny", "start": start, "end": time.time(), "kernel": kernel,
             "launches": launches, "sleep_cycles": args.sleep_cycles if kernel == "sleep" else 0})
    del hold

    # pair: matmuls here, one spinning block in the spinner, at once.
    if spin.stdout.readline().strip() != "ready":
        raise RuntimeError("the spinner did not start")
    start = time.time()
    spin.stdin.write("go\n")
    spin.stdin.flush()
    end = start + args.phase_seconds
    while time.time() < end:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
    spin.wait(timeout=args.phase_seconds + 30)
    w.phase({"phase": "pair", "start": start, "end": time.time(), "busy_pid": os.getpid(), "spin_pid": spin.pid})


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase-seconds", type=float, default=30.0, help="length of each phase (default 30)")
    p.add_argument("--out", default="truth.jsonl", help="where to write the phases' JSON lines")
    p.add_argument("--dry-run", action="store_true", help="no torch, no GPU: sleep through the phases")
    p.add_argument("--matrix", type=int, default=8192, help="matmul size for busy and duty (default 8192)")
    p.add_argument("--tiny-kernel", choices=("sleep", "add"), default="sleep",
                   help="tiny phase kernel: torch.cuda._sleep (one spinning thread) or a one-element add")
    p.add_argument("--sleep-cycles", type=int, default=1000000,
                   help="cycles of each torch.cuda._sleep kernel (default 1e6, ~0.5 ms)")
    p.add_argument("--spinner", action="store_true", help="internal: the pair phase's one-block process")
    args = p.parse_args()
    if args.spinner:
        spinner(args)
        return
    w = Writer(args.out)
    try:
        if args.dry_run:
            dry_run(args, w)
        else:
            real_run(args, w)
    finally:
        w.close()


if __name__ == "__main__":
    main()
