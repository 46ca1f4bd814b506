#!/usr/bin/env python3
"""kantor's CPU engine against POT's log-domain Sinkhorn, timed in the same run.

Not a dependency of the library or the CLI: a measurement script. Needs numpy and POT
(apt-get install python3-pot, or pip install pot) and a C++ compiler with Eigen headers.

Protocol (fixed-eps, fixed iteration count, no convergence test):
  POT    ot.bregman.sinkhorn_log(a, b, M, reg=eps, numItermax=K, stopThr=0) in float64 (numpy),
         x, y ~ U[0,1]^d, uniform weights, M = ot.dist(x, y) (squared Euclidean) built OUTSIDE
         the timed region; POT also evaluates its marginal error every 10 iterations (part of
         its loop). One warm-up call, then one timed call per round.
  kantor scripts/bench/row_pass_bench.cpp "sinkhorn" mode, linked against each build's lib/cpu
         objects: K iterations of update_f + update_g with the CPU oracle's formulas (bias,
         row_pass, potentials) on the same distribution (x, y ~ U[0,1]^d, uniform weights,
         cost |x - y|^2), fp32, the whole machine (--threads, default: all cores) and one thread;
         median of 3 timed runs after a warm-up, per round.
  CLI    when <build>/apps/kantor exists: `kantor bench sinkhorn --backend cpu --precision fp32
         --n N --d D --epsilon EPS --iterations K --repeats 3 --warmup 1 --json` (its own data:
         x, y ~ N(0, I), random weights; the timing does not depend on the values), median.

Usage: scripts/bench/pot_cpu.py [--n 3000] [--d 3] [--eps 0.05] [--iterations 50] [--rounds 3]
                                [--threads T] BUILD_DIR [BUILD_DIR ...]
"""
import argparse
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return ""


def eigen_flags():
    try:
        return sh(["pkg-config", "--cflags", "eigen3"]).split()
    except (OSError, subprocess.CalledProcessError):
        return ["-I/usr/include/eigen3"]


def build_driver(build, out):
    objs = sorted(glob.glob(os.path.join(build, "CMakeFiles", "kantor_lib.dir", "lib", "cpu", "*.o")))
    if not objs:
        sys.exit(f"{build}: no lib/cpu objects (build the kantor target there first)")
    cxx = os.environ.get("CXX", "c++")
    cmd = [cxx, "-O3", "-DNDEBUG", "-std=c++17", "-I" + ROOT] + eigen_flags() + [
        os.path.join(ROOT, "scripts", "bench", "row_pass_bench.cpp")] + objs + ["-lpthread", "-o", out]
    sh(cmd)
    return cmd


def run_driver(exe, n, d, eps, iters, threads):
    out = sh([exe, "sinkhorn", str(n), str(n), str(d), str(eps), str(iters), "3", str(threads), "fp32"])
    return json.loads(out.strip().splitlines()[-1])


def run_cli(cli, n, d, eps, iters):
    out = sh([cli, "bench", "sinkhorn", "--backend", "cpu", "--precision", "fp32", "--n", str(n),
              "--d", str(d), "--epsilon", str(eps), "--iterations", str(iters), "--repeats", "3",
              "--warmup", "1", "--json"])
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--d", type=int, default=3)
    ap.add_argument("--eps", type=float, default=0.05)
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("builds", nargs="+")
    args = ap.parse_args()

    import numpy as np
    import ot

    model = ""
    try:
        m = re.search(r"Model name:\s*(.*)", sh(["lscpu"]))
        model = m.group(1).strip() if m else ""
    except (OSError, subprocess.CalledProcessError):
        pass
    print(f"machine: {model or platform.processor()}, {os.cpu_count()} CPUs; python {platform.python_version()}, "
          f"numpy {np.__version__}, POT {ot.__version__}")
    print(f"problem: n = m = {args.n}, d = {args.d}, eps = {args.eps}, {args.iterations} iterations, "
          f"U[0,1]^d, uniform weights; POT float64, kantor fp32")

    drivers = {}
    for b in args.builds:
        b = os.path.abspath(b)
        exe = os.path.join("/tmp", "kantor_pot_cpu_" + re.sub(r"[^A-Za-z0-9]", "_", b))
        cmd = build_driver(b, exe)
        cli = os.path.join(b, "apps", "kantor")
        drivers[b] = (exe, cli if os.access(cli, os.X_OK) else None)
        print(f"build {b}: CMAKE_BUILD_TYPE={cache_value(b, 'CMAKE_BUILD_TYPE')} "
              f"KANTOR_MARCH='{cache_value(b, 'KANTOR_MARCH')}' "
              f"CXX={cache_value(b, 'CMAKE_CXX_COMPILER')} "
              f"flags='{cache_value(b, 'CMAKE_CXX_FLAGS')} {cache_value(b, 'CMAKE_CXX_FLAGS_RELEASE')}'")
        print(f"  driver: {' '.join(cmd[:4])} ... -o {exe}")

    rng = np.random.default_rng(0)
    x = rng.random((args.n, args.d))
    y = rng.random((args.n, args.d))
    a = np.full(args.n, 1.0 / args.n)
    b = np.full(args.n, 1.0 / args.n)
    M = ot.dist(x, y)  # squared Euclidean, outside the timed region

    def pot():
        t0 = time.perf_counter()
        ot.bregman.sinkhorn_log(a, b, M, args.eps, numItermax=args.iterations, stopThr=0)
        return (time.perf_counter() - t0) * 1e3

    import warnings
    warnings.filterwarnings("ignore")  # "Sinkhorn did not converge": stopThr = 0 on purpose
    pot()  # warm-up
    rows = []
    for r in range(args.rounds):
        pot_ms = pot()
        print(f"round {r + 1}: POT sinkhorn_log {pot_ms:.1f} ms")
        for bdir, (exe, cli) in drivers.items():
            name = os.path.basename(bdir)
            for threads in sorted({args.threads, 1}, reverse=True):
                j = run_driver(exe, args.n, args.d, args.eps, args.iterations, threads)
                ms = j["ms_median"]
                rows.append((r, name, f"driver {threads}T ({j['isa']})", pot_ms, ms))
                print(f"  {name:24s} driver {threads} thread(s), {j['isa']:8s}: {ms:8.1f} ms  "
                      f"ratio {pot_ms / ms:6.1f}x")
            if cli:
                j = run_cli(cli, args.n, args.d, args.eps, args.iterations)
                ms = j["ms_median"]
                rows.append((r, name, "CLI", pot_ms, ms))
                print(f"  {name:24s} CLI ({j['engine']}): {ms:8.1f} ms  ratio {pot_ms / ms:6.1f}x")
    print("\nsummary (POT ms / kantor ms, per round):")
    keys = []
    for row in rows:
        if (row[1], row[2]) not in keys:
            keys.append((row[1], row[2]))
    for k in keys:
        ratios = [p / m for (_, n, w, p, m) in rows if (n, w) == k]
        print(f"  {k[0]:24s} {k[1]:24s} " + "  ".join(f"{v:6.1f}x" for v in ratios) +
              f"   median {statistics.median(ratios):6.1f}x")


if __name__ == "__main__":
    main()
