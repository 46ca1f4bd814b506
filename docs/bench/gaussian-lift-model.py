# A numpy model of the multiscale solver's Gaussian lift (docs/multiscale.md, step 3), written
# before the solver's code (twenty-fourth session). The clouds (x uniform, y =
# (0.8 u + 0.1)^2) Morton-sorted, cells of 8, the coarse problem solved to convergence in float64,
# then g_0 lifted from the coarse f over the x cells in several ways and one f update over every
# pair: the column error of (f_1, g_0) and the next two pairs' errors.
#   python3 gaussian-lift-model.py N EPS [COARSE_ITERATIONS]
# Variants: plain (the centroids), a second-order expansion (unstable for wide cells), the exact
# Gaussian integral with the full, isotropic or diagonal covariance, the ideal (a linear f on the
# points over every pair), the clip and cut of 2 c s / eps studied for kMaxCellRatio.
import numpy as np, sys
from scipy.special import logsumexp
rng = np.random.default_rng(0)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
cell = 8
scaled = 0.0025 * ((cell / n) ** (1/3) / (8 / 2**20) ** (1/3)) ** 2  # 2^20's cells relative to eps
eps = scaled if len(sys.argv) < 3 else float(sys.argv[2])
x = rng.random((n, 3)); y = (0.8 * rng.random((n, 3)) + 0.1) ** 2
def morton(p):
    q = np.clip((p * 1024).astype(np.int64), 0, 1023)
    k = np.zeros(len(p), np.int64)
    for b in range(10):
        for a in range(3):
            k |= ((q[:, a] >> b) & 1) << (3 * b + a)
    return np.argsort(k, kind='stable')
x = x[morton(x)]; y = y[morton(y)]
a = np.full(n, 1.0 / n); b = np.full(n, 1.0 / n)
def cells(p, w):
    K = len(p) // cell
    P = p.reshape(K, cell, 3); W = w.reshape(K, cell)
    m = W.sum(1); c = (P * W[..., None]).sum(1) / m[:, None]
    D = P - c[:, None, :]
    S = np.einsum('kc,kca,kcb->kab', W, D, D) / m[:, None, None]
    return c, m, S
xc, ac, Sx = cells(x, a); yc, bc, Sy = cells(y, b)
def C(u, v): return ((u[:, None, :] - v[None, :, :]) ** 2).sum(-1)
def T_f(g, Cm, bw):  # f_i = -eps lse_j (g_j - C_ij)/eps + log b_j
    return -eps * logsumexp((g[None, :] - Cm) / eps + np.log(bw)[None, :], axis=1)
Cc = C(xc, yc)
fc = np.zeros(len(xc)); gc = np.zeros(len(yc))
for it in range(int(sys.argv[3]) if len(sys.argv) > 3 else 3000):
    fc = T_f(gc, Cc, bc); gc = T_f(fc, Cc.T, ac)
Cxy = C(x, y)
def col_err(f, g):
    lp = (f[:, None] + g[None, :] - Cxy) / eps + np.log(a)[:, None] + np.log(b)[None, :]
    cs = np.exp(logsumexp(lp, axis=0)); rs = np.exp(logsumexp(lp, axis=1))
    return np.abs(cs - b).sum(), np.abs(rs - a).sum()
def report(name, g0):
    f1 = T_f(g0, Cxy, b)
    ce, re = col_err(f1, g0)
    g1 = T_f(f1, Cxy.T, a); ce2, re2 = col_err(f1, g1)
    f2 = T_f(g1, Cxy, b); ce3, _ = col_err(f2, g1)
    print(f"{name:28s} (f1,g0) col {ce:.3e} row {re:.1e} | (f1,g1) row {re2:.3e} "
          f"| (f2,g1) col {ce3:.3e}")
print("n", n, "eps", eps, "sigma^2/eps", np.trace(Sx, axis1=1, axis2=2).mean() / 3 / eps)
# plain lift
report("plain", T_f(fc, C(xc, y).T, ac))
# barycentric map of coarse plan on x cells
lp = (fc[:, None] + gc[None, :] - Cc) / eps + np.log(bc)[None, :]
Pn = np.exp(lp - logsumexp(lp, axis=1)[:, None])
TI = Pn @ yc
# covariance-corrected lift
Cyc = C(xc, y)  # K x n
w = y[None, :, :] - TI[:, None, :]
quad = np.einsum('kja,kab,kjb->kj', w, Sx, w)
corr = 2 * quad / eps - np.trace(Sx, axis1=1, axis2=2)[:, None]
report("gauss-corrected", T_f(fc, (Cyc - corr).T, ac))
# exact Gaussian mgf with |delta|^2 term: E exp(<w2,d>/eps - |d|^2/eps), w2 = 2w
def gauss_exact(S, w):
    K = S.shape[0]; out = np.empty(w.shape[:2])
    for k in range(K):
        A = np.linalg.inv(S[k] + 1e-30 * np.eye(3)) if np.linalg.matrix_rank(S[k]) == 3 else None
        M = np.eye(3) + 2 * S[k] / eps
        Mi = np.linalg.inv(M)
        ww = 2 * w[k] / eps
        out[k] = 0.5 * np.einsum('ja,ab,jb->j', ww, S[k] @ Mi, ww) - 0.5 * np.log(np.linalg.det(M))
    return out
corr2 = eps * gauss_exact(Sx, w)
report("gauss-exact", T_f(fc, (Cyc - corr2).T, ac))
# idealized: piecewise linear f on points with gradient 2(x_I - T_I), pass over points
cid = np.arange(n) // cell
fl = fc[cid] + ((2 * (xc - TI))[cid] * (x - xc[cid])).sum(1)
report("linear f on points (ideal)", T_f(fl, Cxy.T, a))
fl0 = fc[cid]
report("const f on points", T_f(fl0, Cxy.T, a))
# isotropic / diagonal approximations of S
Siso = np.einsum('k,ab->kab', np.trace(Sx, axis1=1, axis2=2) / 3, np.eye(3))
report("gauss-exact isotropic", T_f(fc, (Cyc - eps * gauss_exact(Siso, w)).T, ac))
Sdg = np.einsum('kaa,ab->kab', Sx, np.eye(3))
report("gauss-exact diagonal", T_f(fc, (Cyc - eps * gauss_exact(Sdg, w)).T, ac))
# T from coarse f gradient-free alternative: T_I = x_I (no map): blur only
w0 = y[None, :, :] - xc[:, None, :]
report("gauss-exact, T=x (wrong)", T_f(fc, (Cyc - eps * gauss_exact(Sx, w0)).T, ac))
for rmax in [0.25, 0.5, 1.0]:
    cap = 2 * np.trace(Sx, axis1=1, axis2=2) / 3 / eps <= rmax
    Sc = Siso * cap[:, None, None]
    report(f"iso, plain where r > {rmax}", T_f(fc, (Cyc - eps * gauss_exact(Sc, w)).T, ac))
    sc = np.minimum(np.trace(Sx, axis1=1, axis2=2) / 3, rmax * eps / 2)
    Sc2 = np.einsum('k,ab->kab', sc, np.eye(3))
    report(f"iso, s clipped at r = {rmax}", T_f(fc, (Cyc - eps * gauss_exact(Sc2, w)).T, ac))
