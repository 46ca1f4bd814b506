# The pytest suite of the Python package (docs/python.md): run by ctest (python.pytest) with
# PYTHONPATH=<build>/python, or by hand: PYTHONPATH=build/python python3 -m pytest tests/python
import numpy as np
import pytest


def dense_sinkhorn(x, y, a, b, eps, c=1.0, rho_a=np.inf, rho_b=np.inf, iters=200000):
    """Independent float64 reference: log-domain Sinkhorn on the stored cost matrix, damped by
    rho / (rho + eps) on relaxed sides, until the potentials stop moving."""
    C = c * ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    la, lb = np.log(a), np.log(b)
    f, g = np.zeros(len(a)), np.zeros(len(b))
    ta = 1.0 if np.isinf(rho_a) else rho_a / (rho_a + eps)
    tb = 1.0 if np.isinf(rho_b) else rho_b / (rho_b + eps)

    def softmin(z, axis):
        mx = z.max(axis=axis, keepdims=True)
        return -eps * (mx.squeeze(axis) + np.log(np.exp(z - mx).sum(axis=axis)))

    if x is y and a is b and ta == tb:
        # A self-problem: the symmetric averaged update from f = g (alternating updates converge
        # very slowly there, docs/numerics.md section 4).
        for _ in range(iters):
            f_new = 0.5 * (f + ta * softmin(la[None, :] + (f[None, :] - C) / eps, 1))
            change = np.abs(f_new - f).max()
            f = f_new
            if change < 1e-14 * max(1.0, eps):
                break
        return f, f.copy(), np.outer(a, a) * np.exp((f[:, None] + f[None, :] - C) / eps), C
    for _ in range(iters):
        f_new = ta * softmin(lb[None, :] + (g[None, :] - C) / eps, 1)
        g_new = tb * softmin(la[:, None] + (f_new[:, None] - C) / eps, 0)
        change = max(np.abs(f_new - f).max(), np.abs(g_new - g).max())
        f, g = f_new, g_new
        if change < 1e-14 * max(1.0, eps):
            break
    P = np.outer(a, b) * np.exp((f[:, None] + g[None, :] - C) / eps)
    return f, g, P, C


def plan(x, y, a, b, f, g, eps, c=1.0):
    C = c * ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    return np.outer(a, b) * np.exp((f[:, None] + g[None, :] - C) / eps)


@pytest.fixture
def clouds():
    rng = np.random.default_rng(3)
    n, m, d = 40, 30, 2
    x = rng.normal(size=(n, d))
    y = rng.normal(size=(m, d)) + 0.5
    a = rng.uniform(0.5, 1.5, n)
    b = rng.uniform(0.5, 1.5, m)
    return x, y, a / a.sum(), b / b.sum()
