#!/usr/bin/env python3
"""The host CPU's bf16 kernels (package cpu/kern) against torch's CPU matmul on the GPU host, in
one run: alone, then with host-to-device copies in flight (a second process keeps pinned 512 MiB
copies going, as ../shared/bench/cpu_coexec_probe.py does in a thread).

Run from the repository root on the GPU machine (scripts/gpu/cpukern.sh does), with the test
binary built on the dev machine:

    CGO_ENABLED=1 go test -c -tags nogocv -o .gpu-cpukern/kern.test ./cpu/kern
    bash scripts/gpu/cpukern.sh

Steps: (1) the package's tests (every path the CPU has, against a float64 reference); (2) our
sweep of the 4096 -> 12288 projection at rows x threads and torch's on the same shapes, alone;
(3) both again with copies in flight, and the copy rate during each; (4) the AVX-512/AMX row
threshold and the software prefetch distance (alone); (5) the package benchmarks (GEMV, GEMM,
fused MLP shard, and a call's fixed cost) at 14 threads, and one core on each path with its weights in cache. Writes cpukern.md (tables), cpukern.json and the logs to $OUT
(default /tmp/cpukern). Exit status 1 if a test failed or a step broke.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

N, K = 12288, 4096  # the VLM MLP's up projection: 96 MiB of bf16 weights
ROWS = [1, 4, 16, 32, 64, 512]
THREADS = [1, 8, 14, 16]
BAR_GBPS, BAR_TFLOPS = 63.0, 2.4  # torch's numbers of issue 29 (1 row, 64 rows)

COPIER = r"""
import sys, time, torch
src = torch.empty(512 << 20, dtype=torch.uint8).pin_memory()
dst = torch.empty_like(src, device="cuda")
s = torch.cuda.Stream()
n, last = 0, 0.0
print("ready", flush=True)
with torch.cuda.stream(s):
    while True:
        dst.copy_(src, non_blocking=True)
        s.synchronize()
        n += src.numel()
        now = time.perf_counter()
        if now - last > 0.05:
            print(f"{now} {n}", flush=True)
            last = now
"""

BENCH_LINE = re.compile(r"^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+([\d.]+) ns/op\s+([\d.]+) GB/s\s+([\d.]+) TFLOP/s")
SWEEP_NAME = re.compile(r"BenchmarkSweep/path=(\w+)/threads=(\d+)(?:/prefetch=(-?\d+))?/rows=(\d+)")


def log(msg):
    print(msg, flush=True)


class Copier:
    """A process that keeps host-to-device copies in flight and reports bytes copied."""

    def __init__(self):
        self.samples = []  # (perf_counter, bytes)
        self.proc = subprocess.Popen([sys.executable, "-c", COPIER], stdout=subprocess.PIPE, text=True)
        first = self.proc.stdout.readline().strip()
        if first != "ready":
            raise RuntimeError(f"copier did not start: {first!r}")
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        time.sleep(1.0)

    def _read(self):
        for line in self.proc.stdout:
            t, n = line.split()
            self.samples.append((float(t), int(n)))

    def mark(self):
        time.sleep(0.1)
        return self.samples[-1]

    @staticmethod
    def rate(a, b):
        return (b[1] - a[1]) / (b[0] - a[0]) / 1e9 if b[0] > a[0] else float("nan")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def go_bench(binary, args, logfile, timeout=400):
    """Runs the test binary's benchmarks; returns {name: result} and the path each sweep ran on."""
    cmd = [binary, "-test.v", "-test.run", "^$", "-test.benchtime", "20x"] + args
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    with open(logfile, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr)
    res, cur = {}, None
    for line in p.stdout.splitlines():
        m = BENCH_LINE.match(line)
        if m:
            name = m.group(1)
            res.setdefault(name, {}).update(ms=float(m.group(3)) / 1e6, GBps=float(m.group(4)), TFLOPs=float(m.group(5)))
            continue
        if re.match(r"^Benchmark\S+$", line):  # a sub-benchmark starts (-test.v)
            cur = re.sub(r"-\d+$", "", line)
        elif line.startswith("--- BENCH: ") or line.startswith("--- SKIP: "):
            cur = re.sub(r"-\d+$", "", line.split()[2])
            if line.startswith("--- SKIP"):
                res.setdefault(cur, {})["skipped"] = True
        elif cur and "ran on path" in line:
            res.setdefault(cur, {})["path"] = line.split("ran on path")[1].strip()
        elif cur and "SKIPPED" in line:
            res.setdefault(cur, {})["why"] = line.strip()
    if p.returncode != 0:
        log(f"!!! benchmark run failed (exit {p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return res, p.returncode == 0


def sweep(binary, logfile, rows, threads, paths="auto", prefetch="0"):
    args = ["-test.bench", "^BenchmarkSweep$", f"-kern.rows={','.join(map(str, rows))}",
            f"-kern.threads={','.join(map(str, threads))}", f"-kern.paths={paths}", f"-kern.prefetch={prefetch}"]
    res, ok = go_bench(binary, args, logfile)
    out = {}
    for name, r in res.items():
        m = SWEEP_NAME.search(name)
        if m:
            out[(m.group(1), int(m.group(2)), int(m.group(3) or 0), int(m.group(4)))] = r
    return out, ok


def torch_sweep(rows, threads, reps=20):
    import torch
    ws = [torch.randn(N, K, dtype=torch.bfloat16) for _ in range(8)]  # 768 MiB, beyond the L3
    out = {}
    for t in threads:
        torch.set_num_threads(t)
        for r in rows:
            x = torch.randn(r, K, dtype=torch.bfloat16)
            for w in ws[:2]:
                torch.nn.functional.linear(x, w)
            t0 = time.perf_counter()
            for i in range(reps):
                torch.nn.functional.linear(x, ws[i % len(ws)])
            dt = (time.perf_counter() - t0) / reps
            out[(t, r)] = {"ms": dt * 1e3, "GBps": N * K * 2 / dt / 1e9, "TFLOPs": 2 * r * N * K / dt / 1e12}
            log(f"torch threads={t} rows={r}: {out[(t, r)]['GBps']:.1f} GB/s {out[(t, r)]['TFLOPs']:.3f} TFLOP/s")
    return out


def run_tests(binary, logfile):
    cmd = [binary, "-test.v", "-test.count=1", "-test.run", "."]
    log("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    with open(logfile, "w") as f:
        f.write(p.stdout + p.stderr)
    lines = p.stdout.splitlines()
    fails = [l for l in lines if l.lstrip().startswith("--- FAIL")]
    skips = [l for l in lines if "SKIPPED" in l]
    for l in lines:
        if "CPU features" in l or "kern pool" in l or ("path " in l and ("runs here" in l or "SKIPPED" in l)):
            log("  " + l.strip())
    npass = sum(1 for l in lines if l.lstrip().startswith("--- PASS"))
    log(f"tests: {npass} passed, {len(fails)} failed, {len(skips)} skip lines, exit {p.returncode}")
    if p.returncode != 0 or fails:
        log("!!!!!!!! CPUKERN TESTS FAILED !!!!!!!!")
        for l in lines:
            if "FAIL" in l or ("kern_test.go" in l and "want" in l):
                log("  " + l)
    return p.returncode == 0 and not fails


def fmt(v, spec):
    return format(v, spec) if isinstance(v, (int, float)) else "—"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=".gpu-cpukern/kern.test")
    ap.add_argument("--out", default=os.environ.get("OUT") or "/tmp/cpukern")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    binary = os.path.abspath(a.bin)
    golog = os.path.join(a.out, "cpukern-bench.log")
    open(golog, "w").close()
    ok = True

    log("== machine")
    for cmd in ("nproc", "uname -r", "cat /sys/kernel/mm/transparent_hugepage/enabled",
                "grep -m1 'model name' /proc/cpuinfo",
                "grep -o 'avx512_bf16\\|amx_bf16\\|amx_tile' /proc/cpuinfo | sort | uniq -c"):
        log(f"$ {cmd}\n" + subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip())

    log("== 1. tests")
    ok &= run_tests(binary, os.path.join(a.out, "cpukern-tests.log"))

    log("== 2. alone")
    ours, good = sweep(binary, golog, ROWS, THREADS)
    ok &= good
    theirs = torch_sweep(ROWS, THREADS)

    log("== 3. with host-to-device copies in flight")
    cp = Copier()
    m0 = cp.mark()
    ours_h2d, good = sweep(binary, golog, ROWS, THREADS)
    ok &= good
    m1 = cp.mark()
    theirs_h2d = torch_sweep(ROWS, THREADS)
    m2 = cp.mark()
    time.sleep(1.0)
    m3 = cp.mark()
    cp.stop()
    copy_ours, copy_torch = Copier.rate(m0, m1), Copier.rate(m1, m2)
    log(f"copies: {copy_ours:.1f} GB/s during ours, {copy_torch:.1f} GB/s during torch's")

    log("== 4. AVX-512 vs AMX by rows; software prefetch distance")
    thresh, good = sweep(binary, golog, [1, 2, 4, 8, 16], [14, 16], paths="avx512,amx")
    ok &= good
    pf, good = sweep(binary, golog, [1, 64], [14, 16], paths="avx512,amx", prefetch="0,-1,256,1024,2048")
    ok &= good

    log("== 5. package benchmarks at 14 threads; one core with its weights in cache")
    pkg, good = go_bench(binary, ["-test.bench", "^Benchmark(Call|GEMV|GEMM|MLP)$", "-kern.bench-threads=14"], golog)
    ok &= good
    core, good = go_bench(binary, ["-test.bench", "^BenchmarkCore$"], golog)
    ok &= good

    # Tables.
    md = ["# cpu/kern on the GPU host: ours vs torch (4096 → 12288, bf16 weights, 20 calls over 8+ matrices)", "",
          f"Copies in flight: {copy_ours:.1f} GB/s during ours, {copy_torch:.1f} GB/s during torch's.", "",
          "| rows | threads | path | ours GB/s | ours TFLOP/s | torch GB/s | torch TFLOP/s | ours/torch |"
          " H2D: ours GB/s | H2D: torch GB/s | H2D: ours/torch |",
          "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    best = {}
    for t in THREADS:
        for r in ROWS:
            o, o2 = ours.get(("auto", t, 0, r), {}), ours_h2d.get(("auto", t, 0, r), {})
            th, th2 = theirs.get((t, r), {}), theirs_h2d.get((t, r), {})
            ratio = o["GBps"] / th["GBps"] if "GBps" in o and th else None
            ratio2 = o2["GBps"] / th2["GBps"] if "GBps" in o2 and th2 else None
            md.append(f"| {r} | {t} | {o.get('path', 'skipped' if o.get('skipped') else '—')} | "
                      f"{fmt(o.get('GBps'), '.1f')} | {fmt(o.get('TFLOPs'), '.3f')} | {fmt(th.get('GBps'), '.1f')} | "
                      f"{fmt(th.get('TFLOPs'), '.3f')} | {fmt(ratio, '.2f')} | {fmt(o2.get('GBps'), '.1f')} | "
                      f"{fmt(th2.get('GBps'), '.1f')} | {fmt(ratio2, '.2f')} |")
            for who, d in (("ours", o), ("torch", th), ("ours_h2d", o2), ("torch_h2d", th2)):
                if "GBps" in d and d["GBps"] > best.get((who, r), {}).get("GBps", 0):
                    best[(who, r)] = dict(d, threads=t)
    md += ["", "## The bar (best over thread counts)", ""]
    for r, key, bar, unit in ((1, "GBps", BAR_GBPS, "GB/s"), (64, "TFLOPs", BAR_TFLOPS, "TFLOP/s")):
        for sfx, label in (("", "alone"), ("_h2d", "with copies")):
            o, th = best.get(("ours" + sfx, r), {}), best.get(("torch" + sfx, r), {})
            ov, tv = o.get(key, 0), th.get(key, 0)
            verdict = "PASS" if ov >= bar and ov >= tv else "FAIL"
            line = (f"- {r} row(s), {label}: ours {ov:.3g} {unit} ({o.get('threads')} threads), torch {tv:.3g} "
                    f"({th.get('threads')} threads), bar {bar} {unit}: **{verdict}**")
            md.append(line)
            log(line)
    md += ["", "## AVX-512 vs AMX by rows (alone)", "", "| rows | threads | avx512 GB/s | amx GB/s |",
           "| ---: | ---: | ---: | ---: |"]
    for t in (14, 16):
        for r in (1, 2, 4, 8, 16):
            v = [thresh.get((p, t, 0, r), {}).get("GBps") for p in ("avx512", "amx")]
            md.append(f"| {r} | {t} | {fmt(v[0], '.1f')} | {fmt(v[1], '.1f')} |")
    md += ["", "## Software prefetch distance (columns; 0 = built-in: avx512 1024, amx 512; -1 = none), GB/s", "",
           "| path | threads | rows | built-in | none | 256 | 1024 | 2048 |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in ("avx512", "amx"):
        for t in (14, 16):
            for r in (1, 64):
                v = [pf.get((p, t, d, r), {}).get("GBps") for d in (0, -1, 256, 1024, 2048)]
                md.append(f"| {p} | {t} | {r} | " + " | ".join(fmt(x, ".1f") for x in v) + " |")
    md += ["", "## Package benchmarks, 14 threads", "", "| benchmark | ms | GB/s | TFLOP/s |", "| --- | ---: | ---: | ---: |"]
    for name, r in sorted(pkg.items()):
        if "GBps" in r:
            md.append(f"| {name} | {r['ms']:.3f} | {r['GBps']:.1f} | {r['TFLOPs']:.3f} |")
    md += ["", "## One core, weights in its L2 cache (256 × 2048)", "", "| benchmark | GB/s | TFLOP/s |", "| --- | ---: | ---: |"]
    for name, r in sorted(core.items()):
        if "GBps" in r:
            md.append(f"| {name} | {r['GBps']:.1f} | {r['TFLOPs']:.3f} |")
    text = "\n".join(md) + "\n"
    with open(os.path.join(a.out, "cpukern.md"), "w") as f:
        f.write(text)
    key = lambda d: {"/".join(map(str, k)): v for k, v in d.items()}
    with open(os.path.join(a.out, "cpukern.json"), "w") as f:
        json.dump({"ours": key(ours), "torch": key(theirs), "ours_h2d": key(ours_h2d), "torch_h2d": key(theirs_h2d),
                   "copy_GBps": {"during_ours": copy_ours, "during_torch": copy_torch,
                                 "idle_after": Copier.rate(m2, m3)},
                   "threshold": key(thresh), "prefetch": key(pf), "package": pkg, "core": core}, f, indent=1)
    log(text)
    if not ok:
        log("!!!!!!!! SOMETHING FAILED: see above and cpukern-tests.log / cpukern-bench.log !!!!!!!!")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
