#!/usr/bin/env python3
"""The peer side of the value + gradient rows of docs/benchmarks.md ("Derivatives"): FlashSinkhorn
(pip package flash-sinkhorn, torch + Triton) on the protocol of ../shared/docs/performance.md
section 2 (x, y ~ N(0, I) in R^d, weights rand + 0.1 normalized, cost |x - y|^2, eps fixed, a
fixed number of iterations, TF32 on), timed forward only and forward + gradient w.r.t. x.

One JSON line per (n, d, backend): medians and extremes in ms over --repeats timed runs after
--warmup untimed ones (the first call compiles and autotunes the Triton kernels). Runs beside
`kantor bench sinkhorn ... --gradient --json` in the same device call; it is a benchmark helper,
never imported by the library or its tests.

--hvp instead times one Hessian-vector product w.r.t. x (`hvp_x_sqeuclid_from_potentials`, fp32
without TF32, CG to --cg-tolerance, its default preconditioner) from potentials iterated
--potential-iterations times at the fixed eps (untimed), in a random direction: the protocol of
../shared/docs/performance.md section 5, beside `kantor bench sinkhorn --hvp`.
"""
import argparse
import json
import statistics
import sys
import time


def g_rng(dev, seed):
    import torch
    return torch.Generator(device=dev).manual_seed(seed)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10000, 50000])
    ap.add_argument("--d", type=int, default=64)
    ap.add_argument("--epsilon", type=float, default=0.1)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--backends", nargs="+", default=["symmetric", "alternating"])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hvp", action="store_true")
    ap.add_argument("--cg-tolerance", type=float, default=1e-6)
    ap.add_argument("--potential-iterations", type=int, default=500)
    args = ap.parse_args()

    import torch
    import flash_sinkhorn
    from flash_sinkhorn import SamplesLoss

    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda")

    def timed(fn):
        for _ in range(args.warmup):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(1e3 * (time.perf_counter() - t0))
        return out

    for n in args.n:
        g = torch.Generator(device=dev).manual_seed(args.seed)
        x = torch.randn(n, args.d, device=dev, generator=g)
        y = torch.randn(n, args.d, device=dev, generator=g)
        a = torch.rand(n, device=dev, generator=g) + 0.1
        b = torch.rand(n, device=dev, generator=g) + 0.1
        a, b = a / a.sum(), b / b.sum()
        if args.hvp:
            from flash_sinkhorn.hvp import (geomloss_to_ott_potentials,
                                            hvp_x_sqeuclid_from_potentials,
                                            sinkhorn_prelast_potentials_sqeuclid)
            torch.backends.cuda.matmul.allow_tf32 = False
            f, g = sinkhorn_prelast_potentials_sqeuclid(
                x, y, a, b, eps_list=[args.epsilon] * args.potential_iterations,
                allow_tf32=False)
            f_hat, g_hat = geomloss_to_ott_potentials(f, g, a, b, eps=args.epsilon)
            A = torch.randn(n, args.d, device=dev, generator=g_rng(dev, args.seed + 1))
            info = {}

            def hvp():
                out, inf = hvp_x_sqeuclid_from_potentials(
                    x, y, f_hat, g_hat, A, eps=args.epsilon, cg_rtol=args.cg_tolerance,
                    cg_atol=args.cg_tolerance, allow_tf32=False)
                info["info"] = inf
                return out

            t_compile = time.perf_counter()
            hvp()
            torch.cuda.synchronize()
            t_compile = time.perf_counter() - t_compile
            ms = timed(hvp)
            inf = info["info"]
            print(json.dumps({
                "peer": "flash_sinkhorn", "version": flash_sinkhorn.__version__, "n": n, "m": n,
                "d": args.d, "epsilon": args.epsilon, "hvp": True,
                "potential_iterations": args.potential_iterations,
                "cg_tolerance": args.cg_tolerance, "first_call_s": round(t_compile, 3),
                "hvp_ms": statistics.median(ms), "hvp_min_ms": min(ms), "hvp_max_ms": max(ms),
                "cg_iterations": int(inf.cg_iters), "cg_converged": bool(inf.cg_converged),
                "cg_residual": float(inf.cg_residual),
                "gpu": torch.cuda.get_device_name(0)}), flush=True)
            continue
        for backend in args.backends:
            loss = SamplesLoss(
                "sinkhorn", p=2, backend=backend, use_epsilon_scaling=False,
                eps=args.epsilon, n_iters=args.iterations, allow_tf32=True, half_cost=False)
            xg = x.clone().requires_grad_(True)

            def forward():
                with torch.no_grad():
                    return loss(a, x, b, y)

            def forward_backward():
                xg.grad = None
                v = loss(a, xg, b, y)
                v.backward()
                return v

            t_compile = time.perf_counter()
            value = float(forward_backward())
            torch.cuda.synchronize()
            t_compile = time.perf_counter() - t_compile
            fwd = timed(forward)
            both = timed(forward_backward)
            rec = {
                "peer": "flash_sinkhorn", "version": flash_sinkhorn.__version__,
                "n": n, "m": n, "d": args.d, "epsilon": args.epsilon,
                "iterations": args.iterations, "backend": backend, "value": value,
                "first_call_s": round(t_compile, 3),
                "forward_ms": statistics.median(fwd), "forward_min_ms": min(fwd),
                "forward_max_ms": max(fwd),
                "forward_gradient_ms": statistics.median(both),
                "forward_gradient_min_ms": min(both), "forward_gradient_max_ms": max(both),
                "gradient_norm": float(xg.grad.norm()),
                "gpu": torch.cuda.get_device_name(0),
            }
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
