"""kantor: entropic optimal transport on the CPU and CUDA engines of the C++ library.

Arrays are passed through DLPack without copies (numpy on the CPU; torch, CuPy and JAX arrays in
CPU or CUDA memory); results come back as arrays of the input's kind. Importing kantor does not
import torch. Conventions (cost c |x - y|^2, eps in cost units, potentials f, g with
P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)): docs/numerics.md. Usage: docs/python.md.

    import numpy as np, kantor
    x, y = np.random.rand(500, 3), np.random.rand(400, 3)
    r = kantor.solve(x, y, eps=0.01)
    print(r.summary.converged, r.summary.marginal_error, r.summary.dual_cost)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

from . import _kantor

__all__ = [
    "Summary", "Result", "DivergenceResult", "solve", "divergence", "gradient",
    "barycentric_map", "hvp", "newton", "otdd", "OtddResult", "apply", "apply_transpose", "birkhoff",
    "birkhoff_backward",
    "cuda_available", "__version__",
]

__version__ = _kantor.version()


def cuda_available() -> bool:
    """True when this build has the CUDA engine and a device is visible."""
    return bool(_kantor.cuda_available())


class _Reports:
    """brief_report() / full_report() of a frozen result that carries the C++ texts."""

    def brief_report(self) -> str:
        return self._brief

    def full_report(self) -> str:
        return self._full


@dataclasses.dataclass(frozen=True)
class Summary(_Reports):
    """SinkhornSummary's fields under the same names (include/kantor/sinkhorn.hpp)."""
    converged: bool
    termination: str
    message: str
    n: int
    m: int
    d: int
    schedule: str
    backend: str
    backend_note: str
    precision: str
    engine: str
    epsilon: float
    epsilon_reached: float
    initial_epsilon: float
    resolvable_epsilon: float
    tolerance: float
    iterations: int
    annealing_iterations: int
    marginal_error: float
    marginal_error_slack: float
    residual: float
    certificates: int
    relaxation: float
    solver: str
    solver_note: str
    multiscale_levels: int
    kept_fraction: float
    truncation_bound: float
    rho_a: float
    rho_b: float
    mass_a: float
    mass_b: float
    marginal_kl_a: float
    marginal_kl_b: float
    dual_cost: float
    primal_cost: float
    regularized_cost: float
    dual_gap: float
    plan_mass: float
    seconds_setup: float
    seconds_iterations: float
    seconds_costs: float
    seconds: float
    _brief: str = dataclasses.field(repr=False, default="")
    _full: str = dataclasses.field(repr=False, default="")

    @staticmethod
    def _from(d: dict) -> "Summary":
        d = dict(d)
        brief, full = d.pop("brief_report"), d.pop("full_report")
        return Summary(**d, _brief=brief, _full=full)


@dataclasses.dataclass(frozen=True)
class Result:
    """Potentials f (n), g (m) of the input's array kind, and the Summary."""
    f: Any
    g: Any
    summary: Summary


@dataclasses.dataclass(frozen=True)
class DivergenceResult:
    """The debiased divergence S = OT(a,b) - OT(a,a)/2 - OT(b,b)/2 (+ the unbalanced mass term),
    its raw value and error bound, the (x, y) problem's potentials and the three Summaries."""
    divergence: float
    divergence_raw: float
    divergence_bound: float
    f: Any
    g: Any
    summary: Summary
    summary_xx: Summary
    summary_yy: Summary

    @property
    def converged(self) -> bool:
        return self.summary.converged and self.summary_xx.converged and self.summary_yy.converged


# ---- array kinds ---------------------------------------------------------------------------

def _is_torch(a) -> bool:
    return type(a).__module__.startswith("torch")


def _like(out, ref):
    """Returns the numpy array `out` as an array of ref's kind (torch: same device)."""
    if out is None:
        return None
    if _is_torch(ref):
        import torch
        t = torch.from_numpy(out)
        return t.to(ref.device) if ref.device.type != "cpu" else t
    mod = type(ref).__module__
    if mod.startswith("cupy"):
        import cupy
        return cupy.asarray(out)
    if mod.startswith("jax"):
        import jax.numpy as jnp
        return jnp.asarray(out)
    return out


def _stream_of(a) -> int:
    """The caller's current CUDA stream for a torch CUDA tensor (0 otherwise: the context's own).
    torch's default stream has the handle 0, which for kantor would mean "make your own stream":
    it is passed as cudaStreamLegacy (1), the legacy default stream itself, so that kantor's work
    is ordered with torch's on it."""
    if _is_torch(a) and a.device.type == "cuda":
        import torch
        handle = int(torch.cuda.current_stream(a.device).cuda_stream)
        return handle if handle != 0 else 1
    return 0


def _check_array(a, name: str):
    if a is None:
        return None
    if not (hasattr(a, "__dlpack__") or hasattr(a, "__array_interface__")):
        raise TypeError(f"{name}: expected an array (numpy, torch, CuPy, JAX), got {type(a).__name__}")
    if _is_torch(a) and a.requires_grad:
        a = a.detach()
    return a


def _rho(rho, rho_a, rho_b, reach, cost_scale):
    if reach is not None:
        if rho is not None or rho_a is not None or rho_b is not None:
            raise ValueError("reach and rho / rho_a / rho_b are mutually exclusive (reach R is rho = 2 c R^2)")
        if not (reach > 0 and math.isfinite(reach)):
            raise ValueError(f"reach must be finite and > 0, got {reach}")
        rho = 2.0 * cost_scale * reach * reach
    if rho is not None and (rho_a is not None or rho_b is not None):
        raise ValueError("rho sets both marginal penalties; give rho or rho_a / rho_b")
    ra = rho if rho is not None else rho_a
    rb = rho if rho is not None else rho_b
    for v, name in ((ra, "rho_a"), (rb, "rho_b")):
        if v is not None and not (v > 0):
            raise ValueError(f"{name} must be > 0 (None or inf: a strict marginal), got {v}")
    return (0.0 if ra is None or ra == math.inf else float(ra),
            0.0 if rb is None or rb == math.inf else float(rb))


def _args(eps, epsilon, cost_scale, rho, rho_a, rho_b, reach, precision, backend, tolerance,
          max_iterations, anneal, scaling, schedule, solver, relaxation, threads):
    if eps is not None and epsilon is not None:
        raise ValueError("give eps or epsilon, not both")
    e = eps if eps is not None else epsilon
    if e is None:
        raise ValueError("eps: the entropic regularization (> 0, cost units) is required")
    a = _kantor.SolveArgs()
    a.epsilon = float(e)
    a.cost_scale = float(cost_scale)
    a.rho_a, a.rho_b = _rho(rho, rho_a, rho_b, reach, float(cost_scale))
    a.precision = precision or ""
    a.backend = backend or "auto"
    a.tolerance = float(tolerance)
    a.max_iterations = int(max_iterations)
    a.anneal = bool(anneal)
    a.scaling = float(scaling)
    a.schedule = schedule
    a.solver = solver
    a.relaxation = float(relaxation)
    a.threads = int(threads)
    return a


def _run(x, y, a, b, args, debias=False, gradient=(), want_map=False, direction=None):
    x, y = _check_array(x, "x"), _check_array(y, "y")
    a, b = _check_array(a, "a"), _check_array(b, "b")
    args.debias = bool(debias)
    args.gradient = list(gradient)
    args.want_map = bool(want_map)
    args.stream = _stream_of(x)
    return _kantor.solve(x, y, a, b, args, _check_array(direction, "direction"))


_COMMON = dict(cost_scale=1.0, rho=None, rho_a=None, rho_b=None, reach=None, precision=None,
               backend=None, tolerance=0.0, max_iterations=10000, anneal=True, scaling=0.5,
               schedule="alternating", solver="auto", relaxation=1.0, threads=0)


def _options(kw):
    unknown = set(kw) - set(_COMMON)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    o = dict(_COMMON)
    o.update(kw)
    return o


def solve(x, y, a=None, b=None, eps: Optional[float] = None, *, epsilon: Optional[float] = None,
          **options) -> Result:
    """Entropic OT between the weighted clouds (x, a) and (y, b) (a, b None: uniform).

    Options (SinkhornOptions / Problem, same names): cost_scale (c), rho / rho_a / rho_b / reach
    (unbalanced, docs/numerics.md section 9), precision ('fp64', 'fp32', 'tf32', 'bf16'; default:
    the dtype's), backend ('auto': the arrays' device), tolerance (0: the precision's default),
    max_iterations, anneal, scaling, schedule ('alternating' | 'symmetric'), solver ('auto' |
    'dense' | 'multiscale'), relaxation, threads. Returns Result(f, g, summary); the potentials
    are arrays of x's kind. Bad arguments raise TypeError / ValueError naming them.
    """
    o = _options(options)
    r = _run(x, y, a, b, _args(eps, epsilon, **o))
    s = Summary._from(r["summary"])
    return Result(_like(r.get("f"), x), _like(r.get("g"), x), s)


def divergence(x, y, a=None, b=None, eps: Optional[float] = None, *,
               epsilon: Optional[float] = None, **options) -> DivergenceResult:
    """The debiased Sinkhorn divergence (docs/numerics.md), the three problems on one schedule."""
    o = _options(options)
    r = _run(x, y, a, b, _args(eps, epsilon, **o), debias=True)
    return DivergenceResult(r["divergence"], r["divergence_raw"], r["divergence_bound"],
                            _like(r.get("f"), x), _like(r.get("g"), x), Summary._from(r["summary"]),
                            Summary._from(r["summary_xx"]), Summary._from(r["summary_yy"]))


def gradient(x, y, a=None, b=None, eps: Optional[float] = None, *, epsilon: Optional[float] = None,
             wrt: Sequence[str] = ("x",), debias: bool = False, **options):
    """Solves, then returns (value, {name: gradient}) of OT_eps (or S_eps with debias=True) with
    respect to the arguments in `wrt` (of 'x', 'y', 'a', 'b'), at the returned potentials
    (envelope theorem; docs/numerics.md sections 8 and 9), as arrays of x's kind."""
    o = _options(options)
    r = _run(x, y, a, b, _args(eps, epsilon, **o), debias=debias, gradient=wrt)
    s = Summary._from(r["summary"])
    value = r["divergence"] if debias else s.dual_cost
    return value, {k: _like(r.get("grad_" + k), x) for k in wrt}, s


def hvp(x, y, direction, a=None, b=None, eps: Optional[float] = None, *,
        epsilon: Optional[float] = None, debias: bool = False, **options):
    """Solves, then returns (H direction, info, summary): the Hessian of x -> OT_eps(x, y) (or of
    S_eps with debias=True) applied to an n x d direction, matrix-free (a Schur-complement CG,
    docs/numerics.md section 8). `info`: converged, cg_iterations, relative_residual, seconds.
    Host arrays; balanced problems."""
    o = _options(options)
    r = _run(x, y, a, b, _args(eps, epsilon, **o), debias=debias, direction=direction)
    return _like(r.get("hvp"), x), r.get("hvp_summary"), Summary._from(r["summary"])


def newton(x, y, a=None, b=None, eps: Optional[float] = None, *, epsilon: Optional[float] = None,
           method: str = "newton-cg", max_iterations: int = 100, gradient_tolerance: float = 1e-6,
           function_tolerance: float = 1e-10, debias: bool = True, **options):
    """Moves the source cloud toward the target by minimizing S_eps(x, y) (OT_eps with
    debias=False) over the source positions: Newton-CG (trust region, streaming HVPs), 'lbfgs'
    or 'gradient-descent' (docs/newton.md). Returns (positions, report dict: converged, termination,
    objectives, gradient norms, outer / CG iterations, HVP count, seconds, brief_report and
    full_report). float64 host arrays (converted when they are not); the solves are fp64."""
    import numpy as np
    o = _options(options)
    args = _args(eps, epsilon, **o)
    conv = []
    for arr, name in ((x, "x"), (y, "y"), (a, "a"), (b, "b")):
        arr = _check_array(arr, name)
        if arr is None:
            conv.append(None)
            continue
        if _is_torch(arr):
            arr = arr.detach().cpu().numpy()
        conv.append(np.ascontiguousarray(np.asarray(arr), dtype=np.float64))
    r = _kantor.newton(conv[0], conv[1], conv[2], conv[3], args, method, int(max_iterations),
                       float(gradient_tolerance), float(function_tolerance), bool(debias))
    return _like(r.pop("x"), x), r


@dataclasses.dataclass(frozen=True)
class OtddResult(_Reports):
    """The OTDD dataset distance (docs/otdd.md): distance, the label-distance table over the
    union of the classes (source's first), and the run's facts."""
    distance: float
    converged: bool
    mode: str
    label_distance: str
    label_table: Any
    classes_source: list
    classes_target: list
    marginal_error_xy: float
    ot_xy: float
    ot_xx: float
    ot_yy: float
    iterations: int
    seconds: float
    message: str
    # Compatible mode: the kernel family it ran ("auto": the dispatch table; "gemm-3xtf32" on the
    # GPU at fp32 and d > 16); "" in converged mode.
    compatible_kernel: str = ""
    _brief: str = dataclasses.field(repr=False, default="")
    _full: str = dataclasses.field(repr=False, default="")


def otdd(source, source_labels, target, target_labels, *, mode: str = "compatible",
         label_distance: str = "gaussian", eps: float = 0.1, tolerance: float = 0.0,
         precision: Optional[str] = None, backend: Optional[str] = None,
         max_iterations: int = 0) -> OtddResult:
    """Optimal transport dataset distance between two labelled datasets (features n x d, integer
    labels): mode 'compatible' (the public implementation's conventions) or 'converged'
    (certified to `tolerance`); label_distance 'gaussian' or 'exact'. Features are read as
    float64 and labels as int32 (converted when they are not)."""
    import numpy as np
    conv = []
    for arr, name, dt in ((source, "source", np.float64), (source_labels, "source_labels", np.int32),
                          (target, "target", np.float64), (target_labels, "target_labels", np.int32)):
        arr = _check_array(arr, name)
        if _is_torch(arr):
            arr = arr.detach().cpu().numpy()
        a = np.asarray(arr)
        if dt is np.int32 and a.dtype.kind not in "iu":
            raise TypeError(f"{name}: integer labels expected, got dtype {a.dtype}")
        conv.append(np.ascontiguousarray(a, dtype=dt))
    r = _kantor.otdd(conv[0], conv[1], conv[2], conv[3], mode, label_distance, float(eps),
                     float(tolerance), precision or "", backend or "auto", int(max_iterations))
    return OtddResult(r["distance"], r["converged"], r["mode"], r["label_distance"],
                      r["label_table"], list(r["classes_source"]), list(r["classes_target"]),
                      r["marginal_error_xy"], r["ot_xy"], r["ot_xx"], r["ot_yy"], r["iterations"],
                      r["seconds"], r["message"], r["compatible_kernel"], r["brief_report"],
                      r["full_report"])


def barycentric_map(x, y, a=None, b=None, eps: Optional[float] = None, *,
                    epsilon: Optional[float] = None, **options):
    """Solves, then returns (T(x), summary): T(x_i) = sum_j P_ij y_j / sum_j P_ij."""
    o = _options(options)
    r = _run(x, y, a, b, _args(eps, epsilon, **o), want_map=True)
    return _like(r.get("map"), x), Summary._from(r["summary"])


def _apply(x, y, f, g, v, eps, a, b, cost_scale, transpose, backend):
    for arr, name in ((x, "x"), (y, "y"), (f, "f"), (g, "g"), (v, "v")):
        _check_array(arr, name)
    out = _kantor.apply(x, y, _check_array(a, "a"), _check_array(b, "b"), f, g, v, float(eps),
                        float(cost_scale), transpose, backend or "auto", 0)
    return _like(out, x)


def apply(x, y, f, g, v, eps: float, a=None, b=None, cost_scale: float = 1.0, backend=None):
    """P v for the plan P_ij = a_i b_j exp((f_i + g_j - C_ij) / eps) (host arrays)."""
    return _apply(x, y, f, g, v, eps, a, b, cost_scale, False, backend)


def apply_transpose(x, y, f, g, u, eps: float, a=None, b=None, cost_scale: float = 1.0,
                    backend=None):
    """P^T u for the same plan (host arrays)."""
    return _apply(x, y, f, g, u, eps, a, b, cost_scale, True, backend)


def birkhoff(logits, method: str = "newton", iterations: int = 0, tolerance: float = 0.0, out=None):
    """Batched Birkhoff projection of (B, n, n) logits (float32 or bfloat16; numpy, or torch on
    the CPU or the GPU) onto doubly stochastic matrices (docs/birkhoff.md). Returns P (written
    into `out` when given)."""
    logits = _check_array(logits, "logits")
    if out is None:
        if _is_torch(logits):
            import torch
            out = torch.empty_like(logits, memory_format=torch.contiguous_format)
        else:
            import numpy as np
            out = np.empty(logits.shape, dtype=logits.dtype)
    _kantor.birkhoff_forward(logits, out, method, int(iterations), float(tolerance),
                             _stream_of(logits))
    return out


def birkhoff_backward(P, grad_P, logits=None, method: str = "newton", gradient: str = "implicit",
                      iterations: int = 0, out=None):
    """dL/dlogits from the forward output P and dL/dP (implicit differentiation at P, or the
    unrolled truncated map from the logits)."""
    P, grad_P = _check_array(P, "P"), _check_array(grad_P, "grad_P")
    if out is None:
        if _is_torch(P):
            import torch
            out = torch.empty_like(P, memory_format=torch.contiguous_format)
        else:
            import numpy as np
            out = np.empty(P.shape, dtype=P.dtype)
    _kantor.birkhoff_backward(P, grad_P, _check_array(logits, "logits"), out, method, gradient,
                              int(iterations), _stream_of(P))
    return out
