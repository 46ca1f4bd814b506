#!/usr/bin/env python3
"""Cost of the row_pass policies (lib/cpu/row_pass.hpp) against the plain dense pass.

Not a dependency of the library: a measurement script. Builds scripts/bench/row_pass_bench.cpp
against a build's lib/cpu objects and times single LSE passes ("pass" mode: n = m, fp32, x, y ~
U[0,1]^d, scale 40) interleaved, configuration after configuration, for --rounds rounds; each
measurement is the min of 3 timed passes after a warm-up, and the report gives the min and
median over rounds (a shared machine: the min is the robust figure).

  pair term: CLASSES classes (random labels on both sides, table in [-4, 1]) vs none;
  block list: row_tile 128, key_tile 64, 10% of the tiles as a band around the diagonal (one run
              per row tile) or as independent random tiles (adjacent ones merged), vs dense.

Usage: scripts/bench/row_pass_policies.py [--n 20000] [--d 3 64] [--threads 1 2] [--classes 10]
                                          [--rounds 5] [--isa auto] BUILD_DIR
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pot_cpu import build_driver  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, nargs="+", default=[3, 64])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count()])
    ap.add_argument("--classes", type=int, nargs="+", default=[10])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--isa", default="auto")
    ap.add_argument("build")
    args = ap.parse_args()
    exe = "/tmp/kantor_row_pass_policies_bench"
    build_driver(os.path.abspath(args.build), exe)

    configs = []  # (label, d, threads, classes, density %, layout)
    for d in args.d:
        for t in sorted(set(args.threads)):
            configs.append(("plain", d, t, 0, 100, "band"))
            for c in args.classes:
                configs.append((f"pair {c} classes", d, t, c, 100, "band"))
            configs.append(("block list 10% band", d, t, 0, 10, "band"))
            configs.append(("block list 10% random", d, t, 0, 10, "random"))
    times = {c: [] for c in configs}
    info = {}
    for _ in range(args.rounds):
        for c in configs:
            label, d, t, classes, dens, layout = c
            out = subprocess.run([exe, "pass", str(args.n), str(args.n), str(d), str(t), str(classes),
                                  str(dens), "3", "fp32", layout, args.isa],
                                 check=True, capture_output=True, text=True).stdout
            j = json.loads(out.strip().splitlines()[-1])
            times[c].append(j["ms_min"])
            info[c] = j
    print(f"n = m = {args.n}, fp32, isa {info[configs[0]]['isa']}; ms: min / median over {args.rounds} rounds")
    for c in configs:
        label, d, t, classes, dens, layout = c
        base = min(times[("plain", d, t, 0, 100, "band")])
        j = info[c]
        extra = ""
        if dens < 100:
            extra = f" ({j['tiles_listed']}/{j['tiles_total']} tiles, {j['runs']} runs)"
        print(f"  d={d:3d} threads={t} {label:24s} {min(times[c]):9.2f} / {statistics.median(times[c]):9.2f}"
              f"   ratio {min(times[c]) / base:5.3f}{extra}")


if __name__ == "__main__":
    main()
