#!/usr/bin/env python3
"""Benchmarks of the Python package (docs/benchmarks.md, "Python package"): one JSON object per
line on stdout.

- samples_loss: kantor.torch.SamplesLoss forward + backward (debiased, to the certified
  tolerance) at n = m = N, d = D on the GPU: the wall time of the Python call against the time
  the C++ library reports for the same work (the three solves' Summary seconds plus the gradient
  passes, measured inside one kantor.gradient call), so the difference is the Python overhead.
- birkhoff: kantor.torch.birkhoff forward + backward at B matrices of n x n on the GPU (CUDA
  events), to compare with `kantor bench birkhoff` in the same device call.
- cold: with --cold, the first SamplesLoss call of this process (import and context included).
Usage: bench_python.py [--n 10000] [--d 64] [--repeats 5] [--batch 16777216] [--cold]
"""
import argparse
import json
import time

t_start = time.perf_counter()
import torch  # noqa: E402

t_torch = time.perf_counter()
import kantor  # noqa: E402
import kantor.torch as kt  # noqa: E402

t_kantor = time.perf_counter()

p = argparse.ArgumentParser()
p.add_argument("--n", type=int, default=10000)
p.add_argument("--d", type=int, default=64)
p.add_argument("--blur", type=float, default=0.5)
p.add_argument("--repeats", type=int, default=5)
p.add_argument("--batch", type=int, default=1 << 24)
p.add_argument("--cold", action="store_true")
args = p.parse_args()
dev = "cuda"
g = torch.Generator(device="cpu").manual_seed(0)
x = torch.randn(args.n, args.d, generator=g).to(dev).requires_grad_(True)
y = (torch.randn(args.n, args.d, generator=g) + 0.2).to(dev)
loss = kt.SamplesLoss(blur=args.blur, tolerance=1e-4)

if args.cold:
    # The first call of the process (kantor's CUDA context and module state are made here) and a
    # second identical call: their difference is kantor's one-time cost.
    calls = []
    for _ in range(2):
        x.grad = None
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        L = loss(x, y)
        L.backward()
        torch.cuda.synchronize()
        calls.append(time.perf_counter() - t0)
    print(json.dumps({"benchmark": "python_cold", "n": args.n, "d": args.d, "blur": args.blur,
                      "import_torch_s": t_torch - t_start, "import_kantor_s": t_kantor - t_torch,
                      "first_call_s": calls[0], "second_call_s": calls[1],
                      "one_time_cost_s": calls[0] - calls[1],
                      "seconds_from_process_start": time.perf_counter() - t_start}))
    raise SystemExit

walls, inner = [], []
for r in range(args.repeats + 1):
    x.grad = None
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    L = loss(x, y)
    L.backward()
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    # The library's own time for the same work: the three solves' Summary seconds (the gradient
    # passes are not included, so wall - this bounds the Python overhead from above).
    a = kantor._args(args.blur ** 2, None, 0.5, None, None, None, None, None, None, 1e-4, 10000,
                     True, 0.25, "alternating", "auto", 1.0, 0)
    res = kantor._run(x.detach(), y, None, None, a, debias=True, gradient=("x",))
    lib = res["summary"]["seconds"] + res["summary_xx"]["seconds"] + res["summary_yy"]["seconds"]
    if r > 0:  # the first repeat warms up
        walls.append(wall)
        inner.append(lib)
walls.sort()
inner.sort()
print(json.dumps({"benchmark": "python_samples_loss", "n": args.n, "d": args.d,
                  "blur": args.blur, "repeats": args.repeats, "wall_s_median": walls[len(walls) // 2],
                  "library_solves_s_median": inner[len(inner) // 2], "value": float(L),
                  "converged": res["summary"]["converged"],
                  "iterations": res["summary"]["iterations"]}))

# Birkhoff forward + backward.
Lg = torch.randn(args.batch, 4, 4, device=dev)
W = torch.randn(args.batch, 4, 4, device=dev)
ms = []
for r in range(6):
    Lr = Lg.clone().requires_grad_(True)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    P = kt.birkhoff(Lr)
    P.backward(W)
    e1.record()
    torch.cuda.synchronize()
    if r > 0:
        ms.append(e0.elapsed_time(e1))
ms.sort()
print(json.dumps({"benchmark": "python_birkhoff", "batch": args.batch, "n": 4,
                  "both_ms_median": ms[len(ms) // 2], "both_ms_min": ms[0]}))
