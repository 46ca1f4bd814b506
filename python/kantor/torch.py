"""kantor.torch: PyTorch layers over kantor (imports torch; `import kantor` alone does not).

- SamplesLoss: GeomLoss's `SamplesLoss("sinkhorn", p=2, ...)` conventions (cost |x - y|^2 / 2,
  eps = blur^2, rho = reach^2), with an analytic backward: one call solves and returns the
  envelope gradients (no unrolled iterations). Differences from GeomLoss: kantor iterates at the
  final eps until its certified tolerance is met (GeomLoss stops after the annealing schedule),
  and the gradient with respect to balanced weights is the one in the caller's raw weights (the
  weights are normalized to mass 1), which differs from GeomLoss's potentials by a constant.
- birkhoff: the batched Birkhoff projection (mHC) as a torch custom op `kantor::birkhoff` with an
  implicit (or unrolled) backward, float32 and bfloat16, CPU and CUDA; opaque to torch.compile.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import birkhoff as _birkhoff_np, birkhoff_backward as _birkhoff_backward_np
from . import _args, _run

__all__ = ["SamplesLoss", "birkhoff"]


def _to(t, ref):
    return torch.from_numpy(t).to(device=ref.device, dtype=ref.dtype)


class SamplesLoss(torch.nn.Module):
    """GeomLoss-compatible `SamplesLoss(loss="sinkhorn", p=2, blur, reach, scaling, debias)`.

    Inputs: x (N, D), y (M, D), or batched (B, N, D), (B, M, D); with weights
    loss(a, x, b, y) (a (N,) or (B, N)). Returns a scalar (or (B,) for batched inputs).
    Extra keywords go to kantor.solve (tolerance, precision, backend, max_iterations, ...).
    """

    def __init__(self, loss: str = "sinkhorn", p: int = 2, blur: float = 0.05,
                 reach: Optional[float] = None, scaling: float = 0.5, debias: bool = True,
                 **kantor_options):
        super().__init__()
        if loss != "sinkhorn":
            raise ValueError(f"loss: only 'sinkhorn' is implemented, got '{loss}'")
        if p != 2:
            raise ValueError(f"p: only p = 2 (squared Euclidean) is implemented, got {p}")
        if not (0 < scaling < 1):
            raise ValueError(f"scaling must be in (0, 1), got {scaling}")
        if not (blur > 0):
            raise ValueError(f"blur must be > 0, got {blur}")
        self.blur, self.reach, self.scaling, self.debias = blur, reach, scaling, debias
        self.options = kantor_options

    def _args(self):
        o = dict(self.options)
        known = ("precision", "backend", "tolerance", "max_iterations", "anneal", "schedule",
                 "solver", "relaxation", "threads")
        unknown = set(o) - set(known)
        if unknown:
            raise TypeError(f"SamplesLoss: unexpected keyword argument(s): {', '.join(sorted(unknown))}")
        # GeomLoss: cost |x - y|^2 / 2, eps = blur^p, eps shrinks by scaling^p per step,
        # rho = reach^p.
        return _args(self.blur ** 2, None, 0.5, None, None, None, self.reach,
                     o.get("precision"), o.get("backend"), o.get("tolerance", 0.0),
                     o.get("max_iterations", 10000), o.get("anneal", True), self.scaling ** 2,
                     o.get("schedule", "alternating"), o.get("solver", "auto"),
                     o.get("relaxation", 1.0), o.get("threads", 0))

    def forward(self, *args):
        if len(args) == 2:
            a, x, b, y = None, args[0], None, args[1]
        elif len(args) == 4:
            a, x, b, y = args
        else:
            raise TypeError("SamplesLoss expects (x, y) or (a, x, b, y)")
        for t, name in ((x, "x"), (y, "y")):
            if not torch.is_tensor(t):
                raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
        if x.dim() == 3:
            if y.dim() != 3 or y.shape[0] != x.shape[0]:
                raise ValueError("y: batched inputs need y of shape (B, M, D) with x's B")
            return torch.stack([self._single(None if a is None else a[k], x[k],
                                             None if b is None else b[k], y[k])
                                for k in range(x.shape[0])])
        return self._single(a, x, b, y)

    def _single(self, a, x, b, y):
        if x.dtype == torch.bfloat16 or x.dtype == torch.float16:
            raise TypeError("x: float32 or float64 point clouds (convert with .float())")
        want = (x.requires_grad, y.requires_grad, a is not None and a.requires_grad,
                b is not None and b.requires_grad)
        xc, yc = x.detach().contiguous(), y.detach().contiguous()
        ac = None if a is None else a.detach().to(x.dtype).contiguous()
        bc = None if b is None else b.detach().to(x.dtype).contiguous()
        # Autograd needs the original tensors as inputs to route the gradients.
        return _LossWrapper.apply(x, y, a, b, xc, yc, ac, bc, self._args(), self.debias, want)


class _LossWrapper(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y, a, b, xc, yc, ac, bc, args, debias, want):
        wrt = [k for k, w in zip("xyab", want) if w]
        r = _run(xc, yc, ac, bc, args, debias=debias, gradient=wrt)
        s = r["summary"]
        if s["termination"] == "numerical failure":
            raise RuntimeError("kantor: " + s["message"])
        value = r["divergence"] if debias else s["dual_cost"]
        refs = (x, y, a, b)
        grads = [(_to(r["grad_" + k], ref) if w else torch.empty(0))
                 for k, w, ref in zip("xyab", want, refs)]
        ctx.save_for_backward(*grads)
        ctx.want = want
        return torch.tensor(value, dtype=x.dtype, device=x.device)

    @staticmethod
    def backward(ctx, grad_out):
        g = ctx.saved_tensors
        out = [grad_out * g[i] if ctx.want[i] else None for i in range(4)]
        return (*out, None, None, None, None, None, None, None)


# ---- Birkhoff as a custom op -----------------------------------------------------------------

@torch.library.custom_op("kantor::birkhoff", mutates_args=())
def _birkhoff_op(logits: torch.Tensor, method: str, iterations: int) -> torch.Tensor:
    x = logits.contiguous()
    return _birkhoff_np(x, method=method, iterations=iterations)


@_birkhoff_op.register_fake
def _(logits, method, iterations):
    return torch.empty_like(logits, memory_format=torch.contiguous_format)


@torch.library.custom_op("kantor::birkhoff_backward", mutates_args=())
def _birkhoff_backward_op(P: torch.Tensor, grad_P: torch.Tensor, logits: torch.Tensor,
                          method: str, gradient: str, iterations: int) -> torch.Tensor:
    return _birkhoff_backward_np(P.contiguous(), grad_P.contiguous(),
                                 logits.contiguous() if gradient == "unrolled" else None,
                                 method=method, gradient=gradient, iterations=iterations)


@_birkhoff_backward_op.register_fake
def _(P, grad_P, logits, method, gradient, iterations):
    return torch.empty_like(P, memory_format=torch.contiguous_format)


def _setup(ctx, inputs, output):
    logits, method, iterations = inputs
    ctx.save_for_backward(output, logits)
    ctx.method, ctx.iterations = method, iterations


def _backward(ctx, grad_P):
    P, logits = ctx.saved_tensors
    return _birkhoff_backward_op(P, grad_P, logits, ctx.method, "implicit", ctx.iterations), None, None


_birkhoff_op.register_autograd(_backward, setup_context=_setup)


def birkhoff(logits: torch.Tensor, method: str = "newton", gradient: str = "implicit",
             iterations: int = 0) -> torch.Tensor:
    """Doubly stochastic projection of (B, n, n) logits (n <= 16; float32 or bfloat16, CPU or
    CUDA) for mHC layers; differentiable (implicit backward at P, or 'unrolled' for the truncated
    'sinkhorn' / 'deepseek' maps). Registered as torch custom ops (kantor::birkhoff), so
    torch.compile treats it as one opaque node."""
    if gradient not in ("implicit", "unrolled"):
        raise ValueError(f"gradient: 'implicit' or 'unrolled', got '{gradient}'")
    if method == "newton" and gradient == "unrolled":
        raise ValueError("gradient='unrolled' differentiates the truncated maps ('sinkhorn', "
                         "'deepseek'); newton's projection uses 'implicit'")
    if gradient == "unrolled":
        return _BirkhoffUnrolled.apply(logits, method, iterations)
    return _birkhoff_op(logits, method, iterations)


class _BirkhoffUnrolled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, method, iterations):
        P = _birkhoff_op(logits, method, iterations)
        ctx.save_for_backward(P, logits)
        ctx.method, ctx.iterations = method, iterations
        return P

    @staticmethod
    def backward(ctx, grad_P):
        P, logits = ctx.saved_tensors
        return (_birkhoff_backward_op(P, grad_P, logits, ctx.method, "unrolled", ctx.iterations),
                None, None)
