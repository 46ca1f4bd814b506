# kantor with numpy arrays: every function against an independent float64 dense reference
# (conftest.dense_sinkhorn), POT where it applies, finite differences for the gradients; bad
# arguments; zero-copy imports; Ctrl-C.
import dataclasses
import os
import signal
import threading

import numpy as np
import pytest

import kantor
from conftest import dense_sinkhorn, plan


def test_solve_matches_the_dense_reference(clouds):
    x, y, a, b = clouds
    r = kantor.solve(x, y, a, b, eps=0.1, tolerance=1e-11)
    s = r.summary
    assert s.converged and s.precision == "fp64" and s.backend == "cpu"
    assert r.f.dtype == np.float64 and r.f.shape == (40,) and r.g.shape == (30,)
    f, g, P, C = dense_sinkhorn(x, y, a, b, 0.1)
    Q = plan(x, y, a, b, r.f, r.g, 0.1)
    assert np.abs(P - Q).max() <= 1e-9 * P.max()
    assert abs(s.dual_cost - (a @ f + b @ g)) <= 1e-9
    assert abs(s.primal_cost - (P * C).sum()) <= 1e-9
    assert s.marginal_error <= 1e-11
    assert "kantor Sinkhorn summary" in s.full_report() and "converged" in s.brief_report()
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.converged = False


def test_solve_matches_pot(clouds):
    ot = pytest.importorskip("ot")
    x, y, a, b = clouds
    M = ot.dist(x, y)
    P = ot.sinkhorn(a, b, M, 0.1, method="sinkhorn_log", stopThr=1e-13, numItermax=100000)
    r = kantor.solve(x, y, a, b, eps=0.1, tolerance=1e-11)
    Q = plan(x, y, a, b, r.f, r.g, 0.1)
    assert np.abs(P - Q).max() <= 1e-8 * P.max()
    assert abs(r.summary.primal_cost - float(ot.sinkhorn2(a, b, M, 0.1, method="sinkhorn_log",
                                                            stopThr=1e-13, numItermax=100000))) <= 1e-8


def test_unbalanced_matches_pot(clouds):
    ot = pytest.importorskip("ot")
    x, y, a, b = clouds
    b = 1.7 * b
    M = ot.dist(x, y)
    # POT's entropy is sum P log P: shift its cost to make the problems equal (docs/numerics.md 9).
    P = ot.unbalanced.sinkhorn_unbalanced(a, b, M - 0.1 * np.log(np.outer(a, b)), 0.1, 1.0,
                                          method="sinkhorn", numItermax=200000, stopThr=1e-15)
    r = kantor.solve(x, y, a, b, eps=0.1, rho=1.0, tolerance=1e-11)
    assert r.summary.converged and r.summary.mass_b == pytest.approx(1.7)
    Q = plan(x, y, a, b, r.f, r.g, 0.1)
    assert np.abs(P - Q).max() <= 1e-8 * P.max()
    assert r.summary.plan_mass == pytest.approx(P.sum(), rel=1e-9)


def test_semi_unbalanced_and_reach(clouds):
    x, y, a, b = clouds
    b = 2.0 * b
    r = kantor.solve(x, y, a, b, eps=0.1, rho_b=0.5, tolerance=1e-11)
    f, g, P, C = dense_sinkhorn(x, y, a, b, 0.1, rho_b=0.5)
    assert np.abs(plan(x, y, a, b, r.f, r.g, 0.1) - P).max() <= 1e-9 * P.max()
    assert np.isinf(r.summary.rho_a) and r.summary.rho_b == 0.5
    # reach R is rho = 2 c R^2.
    s = kantor.solve(x, y, a, b, eps=0.05, cost_scale=0.5, reach=0.7).summary
    assert s.rho_a == pytest.approx(0.49)


def test_float32_follows_the_dtype(clouds):
    x, y, a, b = clouds
    r = kantor.solve(x.astype(np.float32), y.astype(np.float32), a.astype(np.float32),
                     b.astype(np.float32), eps=0.1)
    assert r.summary.precision == "fp32" and r.f.dtype == np.float32 and r.summary.converged
    r64 = kantor.solve(x, y, a, b, eps=0.1)
    assert r.summary.dual_cost == pytest.approx(r64.summary.dual_cost, rel=1e-4)


def test_divergence(clouds):
    x, y, a, b = clouds
    d = kantor.divergence(x, y, a, b, eps=0.1, tolerance=1e-11)
    assert d.converged and d.divergence > 0
    ref = 0.0
    for (u, v, wu, wv, k) in ((x, y, a, b, 1.0), (x, x, a, a, -0.5), (y, y, b, b, -0.5)):
        f, g, _, _ = dense_sinkhorn(u, v, wu, wv, 0.1)
        ref += k * (wu @ f + wv @ g)
    assert d.divergence == pytest.approx(ref, abs=1e-9)
    assert kantor.divergence(y, x, b, a, eps=0.1, tolerance=1e-11).divergence == pytest.approx(
        d.divergence, abs=1e-9)
    assert abs(kantor.divergence(x, x, a, a, eps=0.1).divergence_raw) <= 1e-12


@pytest.mark.parametrize("debias", [False, True])
def test_gradients_match_finite_differences(clouds, debias):
    x, y, a, b = clouds
    x, y, a, b = x[:12], y[:9], a[:12] / a[:12].sum(), b[:9] / b[:9].sum()
    opts = dict(eps=0.2, tolerance=1e-12)
    value, g, s = kantor.gradient(x, y, a, b, wrt=("x", "y", "a"), debias=debias, **opts)

    def val(xx, yy, aa):
        if debias:
            return kantor.divergence(xx, yy, aa, b, **opts).divergence_raw
        return kantor.solve(xx, yy, aa, b, **opts).summary.dual_cost

    h = 1e-5
    for i, k in ((0, 0), (5, 1), (11, 0)):
        xp, xm = x.copy(), x.copy()
        xp[i, k] += h
        xm[i, k] -= h
        assert g["x"][i, k] == pytest.approx((val(xp, y, a) - val(xm, y, a)) / (2 * h), abs=2e-6)
    yp, ym = y.copy(), y.copy()
    yp[3, 1] += h
    ym[3, 1] -= h
    assert g["y"][3, 1] == pytest.approx((val(x, yp, a) - val(x, ym, a)) / (2 * h), abs=2e-6)
    # Weights: the gradient in the caller's raw weights (normalized inside), along a direction.
    v = np.zeros_like(a)
    v[2], v[7] = 1.0, -1.0  # mass-preserving: a balanced problem needs equal totals
    fd = (val(x, y, a + h * v) - val(x, y, a - h * v)) / (2 * h)
    assert g["a"] @ v == pytest.approx(fd, abs=2e-6)


def test_barycentric_map_and_transport_application(clouds):
    x, y, a, b = clouds
    r = kantor.solve(x, y, a, b, eps=0.1, tolerance=1e-11)
    P = plan(x, y, a, b, r.f, r.g, 0.1)
    T, s = kantor.barycentric_map(x, y, a, b, eps=0.1, tolerance=1e-11)
    assert np.abs(T - (P @ y) / P.sum(1, keepdims=True)).max() <= 1e-9
    v = np.linspace(-1, 1, 30)
    u = np.linspace(0, 2, 40)
    assert np.abs(kantor.apply(x, y, r.f, r.g, v, 0.1, a, b) - P @ v).max() <= 1e-12
    assert np.abs(kantor.apply_transpose(x, y, r.f, r.g, u, 0.1, a, b) - P.T @ u).max() <= 1e-12


def numpy_birkhoff(L, iters=5000):
    K = np.exp(L - L.max(axis=(1, 2), keepdims=True))
    for _ in range(iters):
        K /= K.sum(2, keepdims=True)
        K /= K.sum(1, keepdims=True)
    return K


def test_birkhoff_forward_and_implicit_backward():
    rng = np.random.default_rng(5)
    L = rng.normal(size=(64, 4, 4)).astype(np.float32)
    P = kantor.birkhoff(L)
    ref = numpy_birkhoff(L.astype(np.float64))
    assert np.abs(P - ref).max() <= 1e-5
    # Backward of loss = <W, P(L)> against central differences of the float64 reference.
    W = rng.normal(size=L.shape).astype(np.float32)
    G = kantor.birkhoff_backward(P, W)
    h = 1e-4
    for (k, i, j) in ((0, 0, 0), (3, 1, 2), (63, 3, 3)):
        Lp, Lm = L.astype(np.float64), L.astype(np.float64)
        Lp[k, i, j] += h
        Lm[k, i, j] -= h
        fd = ((numpy_birkhoff(Lp[k:k + 1]) - numpy_birkhoff(Lm[k:k + 1])) * W[k]).sum() / (2 * h)
        assert G[k, i, j] == pytest.approx(fd, abs=2e-4)


def test_bad_arguments_name_the_argument(clouds):
    x, y, a, b = clouds
    cases = [
        (TypeError, "x", lambda: kantor.solve(x.astype(np.int64), y, eps=0.1)),
        (TypeError, "x", lambda: kantor.solve([[0.0, 1.0]], y, eps=0.1)),
        (TypeError, "y", lambda: kantor.solve(x, y.astype(np.float32), eps=0.1)),
        (ValueError, "x", lambda: kantor.solve(x[:, 0], y, eps=0.1)),
        (ValueError, "a", lambda: kantor.solve(x, y, a[:5], b, eps=0.1)),
        (ValueError, "contiguous", lambda: kantor.solve(np.asfortranarray(x), y, eps=0.1)),
        (ValueError, "dimension mismatch", lambda: kantor.solve(x, y[:, :1].copy(), eps=0.1)),
        (ValueError, "eps", lambda: kantor.solve(x, y)),
        (ValueError, "epsilon", lambda: kantor.solve(x, y, eps=-1.0)),
        (ValueError, "weight", lambda: kantor.solve(x, y, -a, b, eps=0.1)),
        (ValueError, "rho", lambda: kantor.solve(x, y, eps=0.1, rho=0.0)),
        (ValueError, "schedule", lambda: kantor.solve(x, y, eps=0.1, schedule="zigzag")),
        (TypeError, "tolerence", lambda: kantor.solve(x, y, eps=0.1, tolerence=1e-3)),
        (ValueError, "logits", lambda: kantor.birkhoff(np.zeros((2, 3, 4), np.float32))),
        (TypeError, "logits", lambda: kantor.birkhoff(np.zeros((2, 3, 3), np.float64))),
    ]
    for exc, word, fn in cases:
        with pytest.raises(exc) as e:
            fn()
        assert word in str(e.value), (word, str(e.value))


def test_arrays_are_read_in_place(clouds):
    x, y, a, b = clouds
    assert kantor._kantor.data_pointer(x) == x.ctypes.data
    rows = x[::2]  # a row-strided view: read through its stride, not copied
    assert kantor._kantor.data_pointer(rows) == rows.ctypes.data
    r1 = kantor.solve(rows, y, eps=0.1)
    r2 = kantor.solve(np.ascontiguousarray(rows), y, eps=0.1)
    assert r1.summary.dual_cost == r2.summary.dual_cost
    # Results round-trip without a copy too.
    r = kantor.solve(x, y, eps=0.1)
    assert kantor._kantor.data_pointer(r.f) == r.f.ctypes.data


def test_ctrl_c_interrupts_a_long_solve():
    rng = np.random.default_rng(0)
    x, y = rng.random((3000, 2)), rng.random((3000, 2))
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        kantor.solve(x, y, eps=1e-4, anneal=False, tolerance=1e-14, max_iterations=10**7)
    timer.cancel()


def test_hvp_matches_finite_differences_of_the_gradient(clouds):
    x, y, a, b = clouds
    rng = np.random.default_rng(2)
    D = rng.normal(size=x.shape)
    Hv, info, s = kantor.hvp(x, y, D, a, b, eps=0.2, tolerance=1e-12)
    assert info["converged"] and s.converged
    h = 1e-5
    gp = kantor.gradient(x + h * D, y, a, b, eps=0.2, tolerance=1e-12)[1]["x"]
    gm = kantor.gradient(x - h * D, y, a, b, eps=0.2, tolerance=1e-12)[1]["x"]
    assert np.abs((gp - gm) / (2 * h) - Hv).max() <= 1e-6 * (1 + np.abs(Hv).max())


def labelled(rng, n, shift):
    labels = rng.integers(0, 3, n)
    return rng.normal(size=(n, 4)) + shift * labels[:, None], labels


def test_otdd_properties_and_the_cli():
    rng = np.random.default_rng(4)
    xs, ls = labelled(rng, 60, 1.0)
    xt, lt = labelled(rng, 50, 0.8)
    r = kantor.otdd(xs, ls, xt, lt, mode="converged", tolerance=1e-6, precision="fp64")
    assert r.converged and r.distance > 0
    W = r.label_table
    assert W.shape == (6, 6) and np.allclose(W, W.T) and np.allclose(np.diag(W), 0)
    assert r.compatible_kernel == ""  # converged mode follows the dispatch table
    # Compatible mode at d <= 16: the table's choice on either engine.
    assert kantor.otdd(xs, ls, xt, lt).compatible_kernel == "auto"
    same = kantor.otdd(xs, ls, xs, ls, mode="converged", tolerance=1e-6, precision="fp64")
    assert abs(same.distance) <= 1e-4
    swapped = kantor.otdd(xt, lt, xs, ls, mode="converged", tolerance=1e-6, precision="fp64")
    assert swapped.distance == pytest.approx(r.distance, rel=1e-4)
    with pytest.raises(TypeError, match="source_labels"):
        kantor.otdd(xs, ls.astype(float), xt, lt)
    # The same computation through the command-line tool (the C++ path), compatible mode.
    cli = os.environ.get("KANTOR_CLI")
    if not cli:
        pytest.skip("KANTOR_CLI not set (ctest sets it when the CLI is built)")
    import json
    import subprocess
    import tempfile
    c = kantor.otdd(xs, ls, xt, lt)
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for name, arr in (("xs", xs), ("ls", ls.astype(np.float64)), ("xt", xt),
                          ("lt", lt.astype(np.float64))):
            paths.append(os.path.join(d, name + ".npy"))
            np.save(paths[-1], arr)
        out = subprocess.run([cli, "otdd", "--backend", "cpu", "--quiet", "--json", "--source",
                              paths[0], "--source-labels", paths[1], "--target", paths[2],
                              "--target-labels", paths[3]], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["distance"] == pytest.approx(c.distance, rel=1e-6)


def test_newton_moves_the_source_onto_the_target():
    rng = np.random.default_rng(0)
    x = rng.random((60, 2))
    y = rng.random((50, 2)) * 0.5 + 0.25
    xn, r = kantor.newton(x, y, eps=0.01, method="newton-cg", max_iterations=60)
    assert r["converged"] and r["hvp_count"] > 0 and xn.shape == x.shape
    assert r["final_objective"] < 1e-3 * r["initial_objective"]
    # The returned positions are a stationary point of S_eps: the gradient, recomputed through
    # kantor.gradient, is at the reported norm.
    value, g, s = kantor.gradient(xn, y, eps=0.01, debias=True, tolerance=1e-12)
    assert value == pytest.approx(r["final_objective"], rel=1e-6, abs=1e-12)
    assert np.abs(g["x"]).max() <= 10 * r["gradient_norm"] + 1e-12
    assert np.abs(x - xn).max() > 0.01  # it moved
    with pytest.raises(ValueError, match="method"):
        kantor.newton(x, y, eps=0.01, method="bfgs")
