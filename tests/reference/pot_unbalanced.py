#!/usr/bin/env python3
"""kantor solve --rho against POT 0.8.2 (Debian python3-pot), an independent implementation.

For rho in {1e-2, 1, 1e2} times the cost scale c in {1, 1/2}, unequal masses and zero weights,
the plan P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) of kantor's fp64 potentials must equal
POT's ot.unbalanced.sinkhorn_unbalanced(a, b, M - eps log(a b^T), eps, rho). POT's entropy is
sum P log P, so the cost is shifted to make its problem ours: <P, C> + eps KL(P | a b^T) +
rho KL(P 1 | a) + rho KL(P^T 1 | b). POT's method='sinkhorn' is used: in POT 0.8.2
'sinkhorn_stabilized' stops after 5 iterations at rho = 100 (measured: transported mass 0.64
against 1.2946 for both kantor and POT's plain method, stopThr 1e-15). The regularized cost and
the transported mass kantor reports are checked against the same quantities evaluated here on
POT's plan.

Usage: pot_unbalanced.py KANTOR_BINARY SCRATCH_DIR. Exit 77 (ctest: skipped) when POT or numpy
cannot be imported.
"""
import json
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ot
except ImportError as e:  # the reference is not installed: skipped, never passed
    print(f"skipped: {e} (install python3-pot)")
    sys.exit(77)


def gkl(p, q):
    p = np.asarray(p, dtype=float)
    q = np.asarray(q, dtype=float)
    pos = p > 0
    return float(np.sum(p[pos] * np.log(p[pos] / q[pos])) + np.sum(q) - np.sum(p))


def main():
    kantor, scratch = sys.argv[1], sys.argv[2]
    os.makedirs(scratch, exist_ok=True)
    work = tempfile.mkdtemp(dir=scratch)
    rng = np.random.default_rng(7)
    failures = 0
    print(f"POT {ot.__version__}")
    for c in (1.0, 0.5):
        for rho_unit in (1e-2, 1.0, 1e2):
            n, m, d, eps = 40, 30, 2, 0.1
            x = rng.normal(size=(n, d))
            y = rng.normal(size=(m, d)) + 0.5
            a = rng.uniform(0.5, 1.5, n)
            b = rng.uniform(0.5, 1.5, m)
            a[3::11] = 0.0  # zero weights
            b[5::13] = 0.0
            a *= 1.0 / a.sum()
            b *= 1.7 / b.sum()
            rho = rho_unit * c
            paths = {k: os.path.join(work, f"{k}.npy") for k in ("x", "y", "a", "b")}
            for k, v in zip("xyab", (x, y, a, b)):
                np.save(paths[k], v)
            pot_prefix = os.path.join(work, "pot.npy")
            cmd = [kantor, "solve", "--backend", "cpu", "--quiet", "--json", "--source", paths["x"],
                   "--target", paths["y"], "--source-weights", paths["a"], "--target-weights",
                   paths["b"], "--epsilon", repr(eps), "--cost-scale", repr(c), "--rho", repr(rho),
                   "--tolerance", "1e-11", "--max-iterations", "200000", "--output-potentials",
                   pot_prefix]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print("kantor failed:", " ".join(cmd), r.stdout, r.stderr)
                failures += 1
                continue
            j = json.loads(r.stdout)
            f = np.load(os.path.join(work, "pot_f.npy"))
            g = np.load(os.path.join(work, "pot_g.npy"))
            M = c * ot.dist(x, y)
            Q = np.outer(a, b) * np.exp((f[:, None] + g[None, :] - M) / eps)
            ab = np.outer(a, b)
            # POT divides by the weights (0 / 0 = NaN for a zero weight): it gets the points of
            # positive weight, whose plan is the whole plan (a zero weight's row is empty).
            ia, jb = a > 0, b > 0
            Ms = M[np.ix_(ia, jb)] - eps * np.log(ab[np.ix_(ia, jb)])
            Psub, log = ot.unbalanced.sinkhorn_unbalanced(a[ia], b[jb], Ms, eps, rho,
                                                          method="sinkhorn", numItermax=500000,
                                                          stopThr=1e-15, log=True)
            P = np.zeros((n, m))
            P[np.ix_(ia, jb)] = Psub
            pot_err = log["err"][-1] if log["err"] else float("nan")
            plan_diff = float(np.abs(P - Q).max())
            primal = float(np.sum(P * M) + eps * gkl(P.ravel(), ab.ravel()) +
                           rho * gkl(P.sum(1), a) + rho * gkl(P.sum(0), b))
            checks = {
                "POT converged": pot_err < 1e-10,
                "kantor converged": bool(j["converged"]) or print(j["message"]),
                "plan": plan_diff <= 1e-8 * P.max(),
                "transported mass": abs(j["transported_mass"] - P.sum()) <= 1e-9 * P.sum(),
                "regularized cost": abs(j["regularized_cost"] - primal) <= 1e-8 * (1 + abs(primal)),
                "dual = primal": abs(j["dual_cost"] - primal) <= 1e-8 * (1 + abs(primal)),
            }
            bad = [k for k, ok in checks.items() if not ok]
            print(f"c {c} rho {rho:g}: plan diff {plan_diff:.2e} (max {P.max():.3g}), mass "
                  f"{P.sum():.12f} vs {j['transported_mass']:.12f}, value {primal:.12f} vs "
                  f"{j['regularized_cost']:.12f}, POT err {pot_err:.1e}, {j['iterations']} "
                  f"iterations{'' if not bad else '  FAILED: ' + ', '.join(bad)}")
            failures += len(bad) > 0
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
