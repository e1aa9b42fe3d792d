"""LRP rules written as forward-identical modifications of the backward pass (docs/design.md section 2).

Every rule here leaves the forward *value* unchanged (up to float rounding) and modifies only the gradient,
so that after one backward pass from the explained logit the relevance of ANY tensor ``a`` on the path is
``a * a.grad`` (seed paper "A Close Look at Decomposition-based Attributions for Transformer Language
Models", appendix C; AttnLRP paper, Achtibat et al. 2024, section 3).

| operation                         | rule                           | implemented by                    |
|-----------------------------------|--------------------------------|-----------------------------------|
| linear / conv                     | epsilon (eps -> 0)             | plain autograd                    |
| elementwise nonlinearity f        | identity                       | :func:`activation`                |
| product of n operands             | uniform 1/n                    | :func:`product`                   |
| softmax                           | AttnLRP softmax rule           | plain autograd (x * grad IS it)   |
| LayerNorm / RMSNorm               | identity on the normaliser     | :func:`rms_norm`, :func:`layer_norm` |
| soft-capping ``c * tanh(x / c)``  | identity                       | :func:`softcap`                   |
| attention (Q K^T, A V)            | uniform on both matmuls        | :func:`attention`                 |
| attention in CP-LRP               | value path only                | :func:`attention` with A constant |
| epsilon-rule denominator ``z+eps``| official stabilisers (opt-in)  | :func:`stabilize`                 |
| MoE router gate values            | softmax rule, or constant      | :func:`router_gates`              |

The slow, explicit relevance-tensor references these are tested against live in ``tests/reference/``.

:func:`attention_hooks` is the one generic window into attention that methods outside LRP need (attention rollout,
Grad-CAM, AtMan, ALTI: :mod:`palrp_bench.attributors`): inside the context every :func:`attention` call records its
weights and/or scales the keys of chosen tokens, without any model twin knowing about it. A recorder with
``trace=True`` also keeps what decompositions of the residual stream need (ALTI, ALTI-Logit): every attention call's
value vectors and output projection, every residual sum and every norm applied to the stream, linked by which tensor
fed which (:class:`AttentionRecorder`). The twins write their residual sums and output projections with
:func:`residual` and :func:`output_projection` (plain ``x + f(x)`` and ``W_O(o)`` outside such a context).
"""
from __future__ import annotations

import logging
import os
import weakref
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Callable, Iterable, Iterator

import torch
import torch.nn.functional as F

from ..errors import BadInputError, is_out_of_memory

__all__ = [
    "scale_grad",
    "stabilize",
    "stabilized_grad",
    "fused_stabilizers",
    "FUSED_STABILIZERS_ENV",
    "activation",
    "product",
    "rms_norm",
    "layer_norm",
    "softcap",
    "router_dtype",
    "float32_at_least",
    "router_gates",
    "attention",
    "rotate_half",
    "output_projection",
    "residual",
    "AttentionRecorder",
    "HeadsRecord",
    "ResidualRecord",
    "NormRecord",
    "AttentionHooks",
    "attention_hooks",
    "attention_hooks_installed",
]


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the incoming gradient is multiplied by a constant factor."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, factor: float) -> torch.Tensor:  # noqa: D401
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.factor, None


def scale_grad(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Return ``x`` unchanged in the forward pass; scale the gradient reaching ``x`` by ``factor``.

    ``factor == 1`` is a no-op and ``factor == 0`` detaches (relevance stops at ``x``).
    """
    if factor == 1.0 or not x.requires_grad:
        return x
    if factor == 0.0:
        return x.detach()
    return _ScaleGrad.apply(x, factor)


#: environment variable choosing how the stabilisers' backward runs (:func:`fused_stabilizers`)
FUSED_STABILIZERS_ENV = "PALRP_FUSED_STABILIZERS"
#: ``auto``: one compiled kernel on CUDA, the eager expression elsewhere; ``compile``: compiled on every device
#: (the CPU then needs a C++ compiler); ``off``: the eager expression everywhere
FUSED_STABILIZER_MODES = ("auto", "compile", "off")
#: smallest tensor the compiled kernel takes: a compiled call costs about 55 us of host time (guards, launch) against
#: about 10 us for the four eager passes of a small tensor, so below this size the eager expression is cheaper
#: (docs/engine.md, "Cost of the stabilisers")
FUSED_MIN_ELEMENTS = 1 << 20
_log = logging.getLogger(__name__)


def _stabilized_grad(grad: torch.Tensor, z: torch.Tensor, eps: torch.Tensor) -> torch.Tensor:
    """``grad * z / (z + eps)``, 0 where ``z / (z + eps)`` is not finite: the backward of :func:`stabilize`.

    ``eps`` is a 0-dim tensor of ``z``'s dtype on ``z``'s device (:func:`_eps_tensor`), so ``z + eps`` adds the same
    number on every device and in the compiled kernel (a Python float is rounded to the dtype by some kernels and
    added in float32 by others). Two numbers of one dtype sum to exactly 0 only when one is minus the other, so the
    denominator vanishes exactly where ``z == -eps``, whether the sum is rounded to the dtype or kept in float32;
    the division gives +-inf there, set to 0 (as is the NaN of a non-finite ``z``). Eager, this is four elementwise
    passes over one temporary (it runs on every linear output and sum of every layer); compiled
    (:func:`_fused_kernel`), the same expression is one kernel that reads ``grad`` and ``z`` once and writes the
    result."""
    factor = torch.div(z, z + eps).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return factor.mul_(grad)


#: device type -> ``torch.compile`` of :func:`_stabilized_grad`, or None once building or running it failed there
_COMPILED: dict[str, Callable | None] = {}
#: (device type, dtype) -> the compiled kernel after it agreed with the eager expression on :func:`_probe`, or None
#: where it did not (or could not be built): then the eager expression answers
_FUSED: dict[tuple[str, torch.dtype], Callable | None] = {}
#: ``eps`` values the probe checks every kernel with (the official sets' values), besides the one of the first call
PROBE_EPS = (1e-8, 0.5e-8, 1e-6, 0.5e-6, 1e-5)


def fused_stabilizers() -> str:
    """How the stabilisers' backward runs in this process: ``$PALRP_FUSED_STABILIZERS`` (:data:`FUSED_STABILIZER_MODES`),
    ``auto`` when unset (docs/engine.md, "Cost of the stabilisers")."""
    mode = os.environ.get(FUSED_STABILIZERS_ENV, "auto").strip().lower() or "auto"
    if mode not in FUSED_STABILIZER_MODES:
        raise BadInputError(f"{FUSED_STABILIZERS_ENV}={mode!r} is not a mode of the fused stabilisers",
                            f"set it to one of: {', '.join(FUSED_STABILIZER_MODES)} (or unset it)")
    return mode


def _compiled(device_type: str) -> Callable | None:
    """``torch.compile`` of :func:`_stabilized_grad` for ``device_type`` (built once; None where it failed): flat
    tensors with dynamic sizes and ``eps`` a tensor input, so one graph per dtype serves every place, every layer and
    every ``eps``."""
    if device_type not in _COMPILED:
        try:
            # emulate_precision_casts: bf16 / fp16 intermediates rounded as the eager ops round them
            _COMPILED[device_type] = torch.compile(_stabilized_grad, dynamic=True, fullgraph=True,
                                                   options={"emulate_precision_casts": True})
        except Exception as err:  # noqa: BLE001 - no compiler backend here: the eager expression does the same
            _fused_failed(device_type, err)
    return _COMPILED.get(device_type)


def _fused_kernel(device: torch.device | str, dtype: torch.dtype, eps: float | None = None) -> Callable | None:
    """The compiled kernel for ``device``'s type and ``dtype`` once it passed :func:`_check_kernel`, or None where
    the mode leaves the backward eager, ``torch.compile`` is unavailable or the kernel disagreed with the eager
    expression (checked once per device type and dtype, with ``eps`` among the probe's values, before the kernel
    computes anything that is used)."""
    device = torch.device(device)
    mode = fused_stabilizers()
    if mode == "off" or (mode == "auto" and device.type != "cuda"):
        return None
    key = (device.type, dtype)
    if key not in _FUSED:
        kernel = _compiled(device.type)
        _FUSED[key] = None if kernel is None else _check_kernel(kernel, device, dtype, () if eps is None else (eps,))
    return _FUSED[key]


def _fused_failed(device_type: str, err: BaseException) -> None:
    _COMPILED[device_type] = None
    _log.warning("fused stabilisers unavailable on %s (%s: %s); using the eager expression", device_type,
                 type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")


@lru_cache(maxsize=None)
def _eps_tensor(eps: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``eps`` as a 0-dim tensor of ``dtype`` on ``device`` (rounded to the dtype once, here): what
    :func:`_stabilized_grad` adds, eager or compiled, on any device."""
    return torch.tensor(eps, dtype=dtype, device=device)


def _probe(eps: float, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad, z)`` of ``dtype`` on ``device`` holding the inputs where a kernel can go wrong: ``z = -eps``
    exactly, 1-4 ulps and 0.1-5 % of ``eps`` from it on both sides, values of the order of ``eps`` and far above
    it, 0 and -0, +-tiny (the smallest normal numbers and a subnormal), NaN, +-inf, +-1 and the largest finite
    values, each with an ordinary gradient; the first 32 ``z`` again with gradients 0, tiny and huge."""
    info = torch.finfo(dtype)
    cpu = torch.device("cpu")
    minus_eps = -_eps_tensor(eps, dtype, cpu)
    near = [minus_eps]
    for direction in (float("inf"), float("-inf")):
        step = minus_eps
        for _ in range(4):
            step = torch.nextafter(step, torch.tensor(direction, dtype=dtype))
            near.append(step)
    special = [0.0, -0.0, info.tiny, -info.tiny, info.tiny / 8, float("nan"), float("inf"), float("-inf"), info.max,
               -info.max, 1.0, -1.0]
    gen = torch.Generator().manual_seed(0)
    relative = -eps * (1 + torch.tensor([-0.05, -0.01, -1e-3, 1e-3, 0.01, 0.05], dtype=torch.float64))
    around = (torch.rand(512, generator=gen, dtype=torch.float64) * 8 - 4) * eps
    far = torch.randn(256, generator=gen, dtype=torch.float64) * torch.logspace(-3, 6, 256, dtype=torch.float64) * eps
    z = torch.cat([torch.stack(near).to(torch.float64), torch.tensor(special, dtype=torch.float64), relative, around,
                   far]).to(dtype)
    grad = torch.randn(z.numel(), generator=gen, dtype=torch.float64).to(dtype)
    extra = torch.tensor([0.0, info.tiny, info.max / 4, -info.max / 4], dtype=torch.float64).to(dtype)
    z = torch.cat([z, z[:32].repeat(len(extra))])
    grad = torch.cat([grad, extra.repeat_interleave(32)])
    return grad.to(device), z.to(device)


def _disagreement(fused: torch.Tensor, eager: torch.Tensor, z: torch.Tensor) -> str | None:
    """None when ``fused`` equals ``eager`` to rounding: NaN and +-inf at the same places, every finite element
    within 2 ulp of the dtype (relative) plus its smallest normal number (absolute: subnormal results may be
    flushed); else one line naming how many elements differ and the first of them."""
    info = torch.finfo(eager.dtype)
    f, e = fused.double(), eager.double()
    nonfinite = ~torch.isfinite(f) | ~torch.isfinite(e)
    same_nonfinite = (torch.isnan(f) & torch.isnan(e)) | (f == e)
    bad = torch.where(nonfinite, ~same_nonfinite, (f - e).abs() > 2 * info.eps * e.abs() + info.tiny)
    if not bool(bad.any()):
        return None
    i = int(bad.nonzero()[0, 0])
    return (f"{int(bad.sum())} of {bad.numel()} probe elements differ, first at z={float(z.reshape(-1)[i]):.6g}: "
            f"compiled {float(f[i]):.6g}, eager {float(e[i]):.6g}")


def _check_kernel(kernel: Callable, device: torch.device, dtype: torch.dtype, eps: Iterable[float] = ()
                  ) -> Callable | None:
    """``kernel`` if it equals the eager expression to rounding on :func:`_probe` for every eps of
    :data:`PROBE_EPS` and ``eps``, else None after one warning (a kernel that raises drops the device type:
    :func:`_fused_failed`). Nothing the kernel computes is used before this check."""
    try:
        with torch.no_grad():
            for value in dict.fromkeys((*PROBE_EPS, *eps)):
                grad, z = _probe(value, dtype, device)
                eps_t = _eps_tensor(value, dtype, device)
                problem = _disagreement(kernel(grad, z, eps_t), _stabilized_grad(grad, z, eps_t), z)
                if problem is not None:
                    _log.warning("fused stabilisers on %s in %s differ from the eager expression (eps=%g: %s); "
                                 "using the eager expression", device.type, str(dtype).replace("torch.", ""),
                                 value, problem)
                    return None
    except Exception as err:  # noqa: BLE001 - e.g. no C++ compiler or Triton: same numbers, eager
        _fused_failed(device.type, err)
        return None
    return kernel


def stabilized_grad(grad: torch.Tensor, z: torch.Tensor, eps: float) -> torch.Tensor:
    """The backward of :func:`stabilize`: one compiled kernel where :func:`fused_stabilizers` says so, ``z`` has at
    least :data:`FUSED_MIN_ELEMENTS` elements and the kernel for ``z``'s device type and dtype agreed with the eager
    expression on the probe (:func:`_check_kernel`, run once before its first use), else the eager expression;
    equal to float rounding either way. The kernel runs only with gradients off, as in a backward pass (a graph
    that differentiates the backward itself, ``create_graph=True``, needs the eager expression; grad mode is also
    part of the compiled graph's guards). A kernel that fails later (other than by running out of memory, which the
    caller handles) is dropped for its device type and dtype with one warning, and the eager expression answers."""
    eps_t = _eps_tensor(float(eps), z.dtype, z.device)
    kernel = None
    if z.numel() >= FUSED_MIN_ELEMENTS and grad.dtype == z.dtype and not torch.is_grad_enabled():
        kernel = _fused_kernel(z.device, z.dtype, float(eps))
    if kernel is None:
        return _stabilized_grad(grad, z, eps_t)
    try:  # flat and detached: one compiled graph per dtype, whatever the rank and the saved tensor's requires_grad
        return kernel(grad.detach().reshape(-1), z.detach().reshape(-1), eps_t).view(z.shape)
    except Exception as err:  # noqa: BLE001 - e.g. dynamo's recompile limit: same numbers, eager
        if is_out_of_memory(err):
            raise
        _FUSED[(z.device.type, z.dtype)] = None
        _log.warning("fused stabilisers on %s in %s failed (%s: %s); using the eager expression", z.device.type,
                     str(z.dtype).replace("torch.", ""), type(err).__name__,
                     str(err).splitlines()[0][:200] if str(err) else "")
        return _stabilized_grad(grad, z, eps_t)


class _Stabilize(torch.autograd.Function):
    """Identity forward; the incoming gradient is multiplied by ``z / (z + eps)`` (0 where ``z + eps == 0``)."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, eps: float) -> torch.Tensor:  # noqa: D401
        ctx.save_for_backward(z)
        ctx.eps = eps
        return z.view_as(z)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (z,) = ctx.saved_tensors
        return stabilized_grad(grad, z, ctx.eps), None


def stabilize(z: torch.Tensor, eps: float) -> torch.Tensor:
    """Return ``z`` unchanged in the forward pass; multiply the gradient reaching ``z`` by ``z / (z + eps)``.

    This is the epsilon rule's stabilised denominator in Gradient x Input form. An epsilon rule with a stabiliser
    divides the relevance of an output by ``z + eps`` instead of ``z`` (AttnLRP paper Eq. 8, Bach et al. 2015
    Eq. 16): ``R_i = x_i * dz/dx_i * R_z / (z + eps)``. With ``R_z = z * g`` (relevance = value x gradient) this is
    ``x_i * dz/dx_i * (g * z / (z + eps))``, i.e. plain autograd below ``z`` after scaling the gradient at ``z``.
    Place it on the output of any operation whose rule is the (stabilised) epsilon rule: a linear map, a sum
    ``a + b``, a matrix product (uniform-epsilon rule: the ``1/2`` split is separate, see :func:`attention`).

    The sign convention is the official PA-LRP / ``lxt`` one, ``z + eps`` (not ``z + eps * sign(z)``; Zennit's
    sign-aware form lives in :mod:`palrp_bench.lrp.gamma`): outputs within ``eps`` of zero are damped when positive
    and amplified when negative. Where ``z + eps`` is exactly 0 the official code divides by zero; here nothing
    flows there. ``eps == 0`` is a no-op (the exact rule, eps -> 0).
    """
    if eps == 0.0 or not z.requires_grad:
        return z
    return _Stabilize.apply(z, float(eps))


def activation(x: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor], rule: str) -> torch.Tensor:
    """Elementwise nonlinearity ``fn(x)`` under an LRP rule.

    * ``"identity"`` (AttnLRP, Eq. 10 of the AttnLRP paper): ``R_x = R_y``; in Gradient x Input form the
      gradient reaching ``x`` is the incoming one times ``f(x)/x`` (as for ``x * (f(x)/x).detach()``), while the
      forward value is ``f(x)`` itself (:class:`_IdentityRule`). Where ``x == 0`` the ratio is irrelevant
      (``f(0) = 0`` for SiLU/GELU) and set to 0 so no NaN appears.
    * ``"gradient"``: plain autograd (Gradient x Input).
    * ``"constant"``: ``f(x)`` without gradient -- the activation is a constant gate (CP-LRP, Ali et al. 2022); the
      relevance then flows entirely through the other operand of the following product.
    """
    if rule == "gradient":
        return fn(x)
    if rule == "constant":
        with torch.no_grad():
            return fn(x)
    if rule == "identity":
        return _IdentityRule.apply(x, fn) if x.requires_grad else fn(x)
    raise ValueError(f"unknown activation rule {rule!r}; expected identity, gradient or constant")


class _IdentityRule(torch.autograd.Function):
    """``f(x)`` forward (no graph of ``f``); backward multiplies the gradient by ``f(x)/x``, ``at_zero`` where
    ``x == 0`` (0 for activations with ``f(0) = 0``; soft-capping's limit 1), saved once: the identity rule in four
    elementwise passes forward and one backward (it runs on every MLP activation, of every expert, and on every
    soft-capped attention score)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, fn, at_zero: float = 0.0) -> torch.Tensor:  # noqa: D401
        y = fn(x)
        ctx.save_for_backward(torch.div(y, x).masked_fill_(x == 0, at_zero))
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (ratio,) = ctx.saved_tensors
        return grad * ratio, None, None


def product(*operands: torch.Tensor, rule: str) -> torch.Tensor:
    """Elementwise product of ``n`` operands.

    ``"uniform"``: the uniform rule (AttnLRP paper Prop. 3.2) gives each operand that carries relevance
    (``requires_grad``) ``1/n`` of the output relevance, which in Gradient x Input form means scaling each
    operand's gradient by ``1/n``. Operands that are constants (no grad) receive nothing and do not count,
    as in the AttnLRP reference implementation. ``"gradient"``: plain product.
    """
    if rule not in ("uniform", "gradient"):
        raise ValueError(f"unknown product rule {rule!r}; expected uniform or gradient")
    if rule == "uniform":
        n = sum(1 for t in operands if t.requires_grad)
        if n > 1:
            operands = tuple(scale_grad(t, 1.0 / n) for t in operands)
    out = operands[0]
    for t in operands[1:]:
        out = out * t
    return out


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float, rule: str, *, offset: float = 0.0,
             weight_before_cast: bool = False, output_dtype: torch.dtype | None = None) -> torch.Tensor:
    """RMSNorm, computed as Hugging Face does (float32 statistics, cast back, then weight).

    ``"identity"``: the normaliser ``rsqrt(mean(x^2) + eps)`` is a constant (AttnLRP paper section 3.3.3), so
    relevance passes through unchanged up to the (linear) gain. ``"gradient"``: plain autograd.

    The gain is ``offset + weight`` (Gemma: ``offset=1``, weights stored centred on 0). ``weight_before_cast``:
    the gain multiplies in the statistics dtype before the cast back (Gemma: ``(x * (1 + w)).to(dtype)``);
    otherwise after it (LLaMA: ``w * x.to(dtype)``). Both are linear in ``x`` once the normaliser is constant.
    ``output_dtype``: the dtype the normalised input is cast to before the gain, instead of the input's (T5: its
    half-precision weight's, when the residual stream is float32 behind a float32 ``wo``).
    """
    dtype = x.dtype
    h = x.to(torch.promote_types(dtype, torch.float32))  # HF computes in float32; float64 stays float64
    inv = torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if rule == "identity":
        inv = inv.detach()
    elif rule != "gradient":
        raise ValueError(f"unknown norm rule {rule!r}; expected identity or gradient")
    if weight_before_cast:
        h = h * inv
        if weight is not None:
            h = h * (offset + weight.to(h.dtype))
        y = h.to(dtype)
    else:
        h = (h * inv).to(output_dtype or dtype)
        y = h if weight is None else (weight if offset == 0.0 else offset + weight) * h
    tracer = _tracer()
    if tracer is not None:
        gain = None if weight is None else (offset + weight if offset != 0.0 else weight)
        tracer.add_norm("rms", x, y, gain, None, eps)
    return y


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
               rule: str) -> torch.Tensor:
    """LayerNorm; under ``"identity"`` the standard deviation is a constant (mean subtraction stays linear)."""
    if rule == "gradient":
        y = F.layer_norm(x, x.shape[-1:], weight, bias, eps)
    elif rule != "identity":
        raise ValueError(f"unknown norm rule {rule!r}; expected identity or gradient")
    else:
        centered = x - x.mean(-1, keepdim=True)
        std = torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + eps).detach()
        y = centered / std
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
    tracer = _tracer()
    if tracer is not None:
        tracer.add_norm("layer", x, y, weight, bias, eps)
    return y


def softcap(x: torch.Tensor, cap: float, rule: str) -> torch.Tensor:
    """Soft-capping ``cap * tanh(x / cap)`` (Gemma 2: attention scores before the softmax, final logits), an
    elementwise nonlinearity.

    ``"identity"`` (AttnLRP's rule for elementwise nonlinearities, as :func:`activation`; the one palrp-bench applies
    in every LRP composite): ``R_x = R_y``, so capping neither creates nor absorbs relevance (gradient ``y / x``,
    1 at ``x = 0``); ``"gradient"``: plain autograd (Gradient x Input). ``"constant"`` is not offered: a constant cap
    would stop all relevance at the logits.
    """
    capped = partial(_capped, cap=float(cap))
    if rule == "gradient":
        return capped(x)
    if rule != "identity":
        raise ValueError(f"unknown soft-capping rule {rule!r}; expected identity or gradient")
    return _IdentityRule.apply(x, capped, 1.0) if x.requires_grad else capped(x)


def _capped(x: torch.Tensor, cap: float) -> torch.Tensor:
    return torch.tanh(x / cap) * cap


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """RoPE helper: ``cat(-x2, x1)`` (a signed permutation, so relevance passes through unchanged)."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


@dataclass
class HeadsRecord:
    """One attention call of a traced forward: the value vectors ``[B, H, T, d]`` the weights multiply (after the
    grouped-query expansion, so head ``h`` of the weights uses head ``h`` here) and the output projection the
    twin applied to the merged heads (:func:`output_projection`; None if it did not)."""

    values: torch.Tensor
    projection: Callable[[torch.Tensor], torch.Tensor] | None = None


@dataclass(frozen=True)
class ResidualRecord:
    """One residual sum ``output = stream + branch`` of a traced forward (:func:`residual`; ``stream`` and ``branch``
    detached, ``output`` the fresh leaf the forward continued with, so a gradient can be taken at it).

    ``stream_from``: which recorded tensor the stream is, ``("residual", i)`` (the output of residual sum ``i``),
    ``("norm", i)`` (the output of norm ``i``: post-norm blocks) or None (none recorded: the first block's input).
    ``branch_from``: the index of the attention call (:attr:`AttentionRecorder.heads`) whose output projection the
    branch is, or None (an MLP, or an attention output transformed again before the sum, e.g. a sandwich norm)."""

    stream: torch.Tensor
    branch: torch.Tensor
    output: torch.Tensor
    stream_from: tuple[str, int] | None
    branch_from: int | None


@dataclass(frozen=True)
class NormRecord:
    """A norm applied to the output of a recorded residual sum (``input_from``: its index), e.g. the pre-norm in
    front of the next sublayer or the post-norm of a BERT block. ``kind``: ``layer`` (``gain * (x - mean) / s +
    bias``, ``s = sqrt(var + eps)``) or ``rms`` (``gain * x / s``, ``s = sqrt(mean(x^2) + eps)``); ``gain`` includes
    a family's offset (Gemma's ``1 + w``). Input and output detached."""

    kind: str
    input: torch.Tensor
    output: torch.Tensor
    gain: torch.Tensor | None
    bias: torch.Tensor | None
    eps: float
    input_from: int

    def inverse_scale(self, dtype: torch.dtype) -> torch.Tensor:
        """``1 / s`` per position, ``[B, T, 1]``, computed in ``dtype``."""
        x = self.input.to(dtype)
        if self.kind == "layer":
            x = x - x.mean(-1, keepdim=True)
        return torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def linear(self, w: torch.Tensor, inverse_scale: torch.Tensor) -> torch.Tensor:
        """The norm's linear part with its normaliser constant (the identity rule's view of it) applied to vectors
        ``w`` ``[..., D]``: ``gain * (w - mean(w)) / s`` (``layer``) or ``gain * w / s`` (``rms``); ``inverse_scale``
        is ``1 / s`` broadcastable to ``w`` (:meth:`inverse_scale`, indexed to the positions of ``w``). The norm
        of a sum is then the sum of the parts' ``linear`` plus the bias."""
        if self.kind == "layer":
            w = w - w.mean(-1, keepdim=True)
        w = w * inverse_scale
        return w if self.gain is None else w * self.gain.to(w.dtype)


class AttentionRecorder:
    """Collects what the accounting identity and the attention-based attributors need from the eager attention path.

    For each attention call it keeps the (masked) scores ``S`` and weights ``A`` with ``retain_grad`` so that,
    after the backward pass, the relevance absorbed by the softmax rule is
    ``sum(A * A.grad) - sum(S * S.grad)`` (relevance entering minus relevance leaving; docs/design.md). ``sites``
    holds each record's ``site`` label (:func:`attention`), so that twins with several kinds of attention (T5's
    encoder, decoder and cross-attention) can be told apart.

    ``trace=True`` records a forward for decompositions of the residual stream (ALTI, ALTI-Logit; installed with
    :func:`attention_hooks`): ``records`` keep ``(None, A.detach(), valid)`` (no scores, no gradients), and in call
    order ``heads`` (:class:`HeadsRecord`: values and output projection per attention call), ``residuals``
    (:class:`ResidualRecord`) and ``norms`` (:class:`NormRecord`, only norms of a residual sum's output). Which
    tensor fed which is decided by identity when the call happens, so the records describe the twin's wiring
    (pre-norm, post-norm, sandwich norms) without the twin saying anything. The trace cuts the autograd graph at
    every residual sum (its output continues as a fresh leaf): a backward from the logits reaches the last residual
    sum and stops there, and the forward keeps no graph of earlier blocks (inference memory). Forward values are
    unchanged.
    """

    def __init__(self, trace: bool = False):
        self.records: list[tuple[torch.Tensor | None, torch.Tensor, torch.Tensor | None]] = []
        #: per record, the ``site`` label its :func:`attention` call gave (None where the twin gives none)
        self.sites: list[str | None] = []
        self.trace = trace
        self.heads: list[HeadsRecord] = []
        self.residuals: list[ResidualRecord] = []
        self.norms: list[NormRecord] = []
        #: per mixture-of-experts router call, ``(logits [B, T, E], gates [B, T, k])`` (:func:`router_gates`)
        self.routers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._nodes: dict[int, tuple[str, int, weakref.ref]] = {}  # id -> (kind, index, the tensor, weakly)
        self._projection: tuple[int, torch.Tensor] | None = None    # the last output projection, until summed

    def _node(self, t: torch.Tensor) -> tuple[str, int] | None:
        """``(kind, index)`` of a recorded residual sum or norm whose output ``t`` is (an id alone could be reused
        once that output is freed: the weak reference says whether it is still the same tensor)."""
        node = self._nodes.get(id(t))
        return None if node is None or node[2]() is not t else node[:2]

    def add(self, scores: torch.Tensor, weights: torch.Tensor, valid: torch.Tensor | None,
            values: torch.Tensor | None = None, site: str | None = None) -> None:
        self.sites.append(site)
        if self.trace:
            self.records.append((None, weights.detach(), valid))
            if values is not None:
                self.heads.append(HeadsRecord(values.detach()))
            return
        if weights.requires_grad:  # a forward without autograd (attention rollout) records the values only
            scores.retain_grad()
            weights.retain_grad()
        self.records.append((scores, weights, valid))

    def add_router(self, logits: torch.Tensor, gates: torch.Tensor) -> None:
        """A mixture-of-experts router's logits and the gate values it handed on (:func:`router_gates`)."""
        for t in (logits, gates):
            if t.requires_grad:
                t.retain_grad()
        self.routers.append((logits, gates))

    def add_projection(self, projection: Callable[[torch.Tensor], torch.Tensor], output: torch.Tensor) -> None:
        """Trace: the output projection of the latest attention call and its output."""
        if self.heads:
            self.heads[-1].projection = projection
            self._projection = (len(self.heads) - 1, output)

    def add_residual(self, stream: torch.Tensor, branch: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
        """Trace: a residual sum; returns its output as a fresh leaf (class docstring)."""
        node = self._node(stream)
        branch_from = None
        if self._projection is not None and branch is self._projection[1]:
            branch_from = self._projection[0]
        self._projection = None
        leaf = output.detach().requires_grad_(output.is_floating_point())
        index = len(self.residuals)
        self.residuals.append(ResidualRecord(stream.detach(), branch.detach(), leaf, node, branch_from))
        self._nodes[id(leaf)] = ("residual", index, weakref.ref(leaf))
        return leaf

    def add_norm(self, kind: str, x: torch.Tensor, y: torch.Tensor, gain, bias, eps: float) -> None:
        """Trace: a norm call, kept when its input is the output of a recorded residual sum."""
        node = self._node(x)
        if node is None or node[0] != "residual":
            return
        index = len(self.norms)
        self.norms.append(NormRecord(kind, x.detach(), y.detach(), None if gain is None else gain.detach(),
                                     None if bias is None else bias.detach(), float(eps), node[1]))
        self._nodes[id(y)] = ("norm", index, weakref.ref(y))  # weakly: the output keeps its norm's graph

    def absorbed(self) -> torch.Tensor:
        """Per-sample relevance absorbed by all softmax rules (attention and mixture-of-experts routers), shape
        ``[B]``."""
        total = None
        parts = [(scores, weights, valid) for scores, weights, valid in self.records]
        parts += [(logits, gates, None) for logits, gates in self.routers]
        for scores, weights, valid in parts:
            r_in = weights.double() * _grad_or_zero(weights).double()
            r_out = scores.double() * _grad_or_zero(scores).double()
            if valid is not None:
                r_out = torch.where(valid, r_out, torch.zeros_like(r_out))
            part = r_in.flatten(1).sum(1) - r_out.flatten(1).sum(1)
            total = part if total is None else total + part
        return total


def _tracer() -> AttentionRecorder | None:
    """The tracing recorder of the active :func:`attention_hooks`, or None."""
    hooks = _HOOKS.get()
    recorder = None if hooks is None else hooks.recorder
    return recorder if recorder is not None and recorder.trace else None


def output_projection(heads: torch.Tensor, projection: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """An attention block's output projection ``projection(o)`` of its merged heads ``o`` ``[B, T, H * d]`` (the
    merge of :func:`attention`'s output). Under a tracing recorder the projection is recorded with the attention
    call it belongs to (:class:`AttentionRecorder`)."""
    out = projection(heads)
    tracer = _tracer()
    if tracer is not None:
        tracer.add_projection(projection, out)
    return out


def residual(stream: torch.Tensor, branch: torch.Tensor, eps: float = 0.0) -> torch.Tensor:
    """A residual sum ``stream + branch`` under the epsilon rule (``eps``: its stabiliser, :func:`stabilize`).
    Under a tracing recorder the sum is recorded and its output continues as a fresh leaf
    (:class:`AttentionRecorder`)."""
    out = stabilize(stream + branch, eps)
    tracer = _tracer()
    if tracer is not None:
        out = tracer.add_residual(stream, branch, out)
    return out


def _grad_or_zero(t: torch.Tensor) -> torch.Tensor:
    return t.grad if t.grad is not None else torch.zeros_like(t)


@dataclass(frozen=True)
class AttentionHooks:
    """What :func:`attention_hooks` installs for the :func:`attention` calls inside its context.

    * ``recorder``: an :class:`AttentionRecorder` that every call adds its scores and weights to (in call order:
      one record per layer), unless the caller passes its own ``recorder``. Needs ``implementation="eager"``.
      A recorder with ``trace=True`` also records the residual stream (:func:`residual`, :func:`output_projection`
      and the norms of residual sums) of every twin that writes them with these functions.
    * ``key_scale``: ``[B, T]`` factors multiplying the key vector of token ``t`` in sample ``b`` before
      ``Q K^T`` in every layer, i.e. column ``t`` of the pre-softmax scores ``H = Q K^T`` is multiplied by
      ``key_scale[b, t]`` (AtMan, Deb et al. 2023; AttnLRP paper appendix A.1.5: ``H~ = H * (1 - p^i)``). Works on
      the fused and the eager path. All ones changes nothing.
    * ``key_scale_sites``: the ``site`` labels of the calls ``key_scale`` applies to (None = every call). T5's
      keys are the encoder tokens only in its ``encoder`` and ``cross`` calls (AtMan on encoder-decoders, AttnLRP
      paper section 4: suppress in every encoder self-attention and only in the decoder's cross-attention).
    """

    recorder: AttentionRecorder | None = None
    key_scale: torch.Tensor | None = None
    key_scale_sites: tuple[str, ...] | None = None


_HOOKS: ContextVar[AttentionHooks | None] = ContextVar("palrp_attention_hooks", default=None)


@contextmanager
def attention_hooks(*, recorder: AttentionRecorder | None = None, key_scale: torch.Tensor | None = None,
                    key_scale_sites: tuple[str, ...] | None = None) -> Iterator[AttentionHooks]:
    """Install :class:`AttentionHooks` for every :func:`attention` call made inside the ``with`` block (this thread
    / task only; nested blocks replace the outer hooks and restore them on exit). Models are never modified."""
    hooks = AttentionHooks(recorder, key_scale, None if key_scale_sites is None else tuple(key_scale_sites))
    token = _HOOKS.set(hooks)
    try:
        yield hooks
    finally:
        _HOOKS.reset(token)


def attention_hooks_installed() -> bool:
    """Whether :func:`attention_hooks` are active here (a recorder, key scaling): forwards that must not be
    recomputed in the backward (:func:`palrp_bench.lrp.recompute.layer`)."""
    return _HOOKS.get() is not None


class _OnesBias(torch.autograd.Function):
    """``bias`` ``[1 or B, H, Tq, Tk]`` times ones ``row`` ``[B, H, Tq]`` and ``col`` ``[B, H, Tk]``
    (``row_i B_ij col_j``), returned as the bias expanded to the batch (a view, no copy: the ones change no value).
    Backward: the exact gradients of the ones, ``sum_j B_ij g_ij`` and ``sum_i B_ij g_ij``, head by head in at least
    float32, so the transient beyond the incoming ``[B, H, Tq, Tk]`` gradient is ``[B, Tq, Tk]``."""

    @staticmethod
    def forward(ctx, bias, row, col):  # noqa: D401
        ctx.save_for_backward(bias)
        ctx.acc = row.dtype
        return bias.expand(row.shape[0], -1, -1, -1)

    @staticmethod
    def backward(ctx, grad):
        (bias,) = ctx.saved_tensors
        want_row, want_col = ctx.needs_input_grad[1], ctx.needs_input_grad[2]
        b, h, tq, tk = grad.shape
        row = grad.new_zeros(b, h, tq, dtype=ctx.acc) if want_row else None
        col = grad.new_zeros(b, h, tk, dtype=ctx.acc) if want_col else None
        for head in range(h):
            r = bias[:, head].to(ctx.acc) * grad[:, head].to(ctx.acc)
            if want_row:
                row[:, head] = r.sum(-1)
            if want_col:
                col[:, head] = r.sum(-2)
        return None, row, col


#: elements of one chunk of scores in :class:`_BiasSinkAttention`'s backward (16 MiB in float32)
BIAS_CHUNK_ELEMENTS = 1 << 22


class _BiasSinkAttention(torch.autograd.Function):
    """``softmax(Q K^T * scale + row_i B_ij col_j) V`` with ones ``row`` / ``col`` (CPU, no grouped heads): the
    forward is PyTorch's fused CPU flash attention with ``B`` as its float mask (it keeps the log-sum-exp); the
    backward recomputes the weights a chunk of queries at a time and returns the exact gradients of ``Q``, ``K``,
    ``V`` and of the ones (``sum_j B_ij g_ij``, ``sum_i B_ij g_ij``, ``g`` the gradient at the scores), so neither
    ``g`` nor the weights are ever held whole: memory beyond the bias itself is linear in the length plus one
    chunk. PyTorch's own path for a mask that needs a gradient is its unfused kernel, which materialises scores,
    weights and their gradients per layer (docs/engine.md, "T5")."""

    @staticmethod
    def forward(ctx, q, k, v, bias, row, col, scale):  # noqa: D401
        mask = bias.expand(q.shape[0], -1, -1, -1)
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=mask,
                                                                             scale=scale)[:2]
        ctx.save_for_backward(q, k, v, bias, out, lse)
        ctx.scale, ctx.acc = scale, row.dtype
        return out

    @staticmethod
    def backward(ctx, d_out):
        q, k, v, bias, out, lse = ctx.saved_tensors
        scale, acc = ctx.scale, ctx.acc
        b, h, tq, _ = q.shape
        tk = k.shape[2]
        d_out = d_out.to(q.dtype)
        delta = (d_out.to(acc) * out.to(acc)).sum(-1, keepdim=True)            # D_i = dO_i . O_i
        dq, dk, dv = torch.empty_like(q), torch.zeros_like(k), torch.zeros_like(v)
        row = q.new_zeros(b, h, tq, dtype=acc) if ctx.needs_input_grad[4] else None
        col = q.new_zeros(b, h, tk, dtype=acc) if ctx.needs_input_grad[5] else None
        kt, vt = k.transpose(-1, -2).reshape(b * h, -1, tk), v.transpose(-1, -2)
        size = max(1, min(tq, BIAS_CHUNK_ELEMENTS // max(1, b * h * tk)))
        for start in range(0, tq, size):
            rows = slice(start, start + size)
            bc = bias[:, :, rows]
            n = bc.shape[2]
            scores = torch.baddbmm(bc.expand(b, -1, -1, -1).reshape(b * h, n, tk).to(q.dtype),
                                   q[:, :, rows].reshape(b * h, n, -1), kt, alpha=scale).view(b, h, n, tk)
            weights = scores.to(acc).sub_(lse[:, :, rows, None].to(acc)).exp_()     # A = exp(S - lse)
            do = d_out[:, :, rows]
            dv += torch.matmul(weights.to(v.dtype).transpose(-1, -2), do)
            g = torch.matmul(do, vt).to(acc).sub_(delta[:, :, rows]).mul_(weights)   # g = A (dA - D)
            gq = g.to(q.dtype)
            dq[:, :, rows] = torch.matmul(gq, k)
            dk += torch.matmul(gq.transpose(-1, -2), q[:, :, rows])
            if row is not None or col is not None:
                r = g.mul_(bc.to(acc))
                if row is not None:
                    row[:, :, rows] = r.sum(-1)
                if col is not None:
                    col += r.sum(-2)
        if scale != 1.0:  # T5 has none
            dq.mul_(scale)
            dk.mul_(scale)
        return dq, dk, dv, None, row, col, None


def _chunked_bias_attention(q: torch.Tensor, n_rep: int) -> bool:
    """Whether a fused attention whose bias relevance is read runs :class:`_BiasSinkAttention` (CPU, no grouped
    heads) rather than SDPA with a mask that needs a gradient."""
    return q.device.type == "cpu" and n_rep == 1


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask: torch.Tensor | None, causal: bool,
              scale: float, weights_share: float, value_share: float, qk_share: float,
              implementation: str = "sdpa", recorder: AttentionRecorder | None = None, qk_eps: float = 0.0,
              mask_eps: float = 0.0, av_eps: float = 0.0, score_softcap: float | None = None,
              softcap_rule: str = "identity", bias: torch.Tensor | None = None,
              bias_sinks: tuple[torch.Tensor, torch.Tensor] | None = None, site: str | None = None) -> torch.Tensor:
    """Scaled dot-product attention ``softmax(cap(Q K^T * scale) + bias + mask) V`` under LRP rules.

    The relevance split is given by three shares (docs/design.md section 2):

    * ``weights_share`` / ``value_share``: how the relevance of ``A @ V`` is split between the attention
      weights ``A`` and the values ``V`` (AttnLRP uniform rule: 1/2, 1/2; CP-LRP: 0, 1; official ViT: 0, 1/2).
    * ``qk_share``: how the relevance of the scores ``Q K^T`` is split between ``Q`` and ``K`` (uniform: 1/2).

    The softmax rule of AttnLRP needs no modification (``x * grad`` of the true softmax is the rule), so on
    the fused path (``implementation="sdpa"``) it suffices to scale the gradient reaching ``q`` and ``k`` by
    ``weights_share * qk_share`` and the gradient reaching ``v`` by ``value_share`` and call PyTorch's fused
    ``scaled_dot_product_attention``: no attention matrix is materialised, memory stays linear in the
    sequence length. ``implementation="eager"`` builds ``S`` and ``A`` explicitly (same relevance; needed by
    :class:`AttentionRecorder` for the accounting identity).

    Shapes: ``q`` ``[B, H, T, d]``, ``k``/``v`` ``[B, Hkv, T, d]`` (grouped-query attention when ``Hkv < H``).
    ``mask``: boolean ``[B, 1, T, T]`` (True = attend) or ``None``; ``causal`` adds the causal constraint.

    Stabilisers (:func:`stabilize`; all 0 = the exact rules): ``qk_eps`` on the unscaled product ``Q K^T``,
    ``mask_eps`` on the scaled scores where a mask is added to them (the official code adds an additive mask with
    the epsilon rule whenever a causal or padding mask exists), ``av_eps`` on ``A @ V``. The two on the scores need
    them materialised: eager path only (the fused path refuses them when relevance flows through the weights).

    ``score_softcap``: scores are soft-capped ``c * tanh(s / c)`` before masking (Gemma 2) under ``softcap_rule``
    (:func:`softcap`). Fused SDPA cannot cap scores, so capped attention always takes the eager path.

    ``bias``: an additive score bias ``[1 or B, H, Tq, Tk]`` (T5's relative position bias), a constant, added to the
    scaled scores under the epsilon rule (eps -> 0: a plain add, so its relevance is ``bias * g`` with ``g`` the
    gradient of the rules at the scores). It must already hold a large negative value (``finfo.min``) at every pair
    that ``mask`` and ``causal`` hide: the fused path passes it to SDPA as the float mask as it is (built once per
    stack, as the library does, it is one tensor for all layers), ``mask`` and ``causal`` then only tell the eager
    path and the recorder which pairs exist. Queries and keys may differ in length (cross-attention; ``causal``
    needs them equal).

    ``bias_sinks``: ones ``(row [B, H, Tq], col [B, H, Tk])`` multiplying the bias, ``row_i B_ij col_j``, whose
    gradients are then the bias relevance per query, ``sum_j B_ij g_ij``, and per key, ``sum_i B_ij g_ij`` (how they
    share it is the caller's: scale the gradients of the ones, :func:`scale_grad`). On the fused path the gradient
    at the scores is taken as the rules define it (``weights_share`` times the true one); on the CPU without grouped
    heads the attention is then :class:`_BiasSinkAttention` (fused forward, chunked backward: no ``T x T`` tensor
    kept), elsewhere SDPA with the bias as a mask that needs a gradient (one ``[B, H, Tq, Tk]`` gradient per call,
    reduced at once by :class:`_OnesBias`).

    ``site``: a label of the call recorded with it (:attr:`AttentionRecorder.sites`), for twins with more than one
    kind of attention (T5: ``encoder``, ``decoder``, ``cross``); None elsewhere.
    """
    hooks = _HOOKS.get()
    if hooks is not None:
        if hooks.key_scale is not None and (hooks.key_scale_sites is None or site in hooks.key_scale_sites):
            if hooks.key_scale.shape != (k.shape[0], k.shape[2]):
                raise ValueError(f"key_scale has shape {tuple(hooks.key_scale.shape)}, expected "
                                 f"[batch, tokens] = {(k.shape[0], k.shape[2])}")
            k = k * hooks.key_scale.to(device=k.device, dtype=k.dtype)[:, None, :, None]
        if recorder is None and hooks.recorder is not None:
            if implementation != "eager":
                raise ValueError("recording attention weights needs implementation='eager'")
            recorder = hooks.recorder
    n_rep = q.shape[1] // k.shape[1]
    if score_softcap is not None and implementation == "sdpa":
        implementation = "eager"
    if implementation == "sdpa" and weights_share != 0 and (qk_eps or (mask_eps and (causal or mask is not None))):
        raise ValueError("stabilisers on the attention scores (qk_eps, mask_eps) need implementation='eager'")
    if implementation == "sdpa":
        qs = scale_grad(q, weights_share * qk_share)
        ks = scale_grad(k, weights_share * qk_share)
        vs = scale_grad(v, value_share)
        attn_mask = mask
        is_causal = causal and mask is None
        if causal and mask is not None:
            attn_mask = mask & _causal_mask(q.shape[2], q.device)
        if bias is not None:  # holds the masking already (docstring)
            attn_mask, is_causal = bias, False
            row, col = (None, None) if bias_sinks is None else (scale_grad(t, weights_share) for t in bias_sinks)
            if row is not None and (row.requires_grad or col.requires_grad):
                if _chunked_bias_attention(q, n_rep):
                    return stabilize(_BiasSinkAttention.apply(qs, ks, vs, bias, row, col, scale), av_eps)
                attn_mask = _OnesBias.apply(bias, row, col)
        out = F.scaled_dot_product_attention(qs, ks, vs, attn_mask=attn_mask, is_causal=is_causal, scale=scale,
                                             enable_gqa=n_rep > 1)
        return stabilize(out, av_eps)
    if implementation != "eager":
        raise ValueError(f"unknown attention implementation {implementation!r}; expected sdpa or eager")
    if n_rep > 1:
        k = k.repeat_interleave(n_rep, dim=1)
        v = v.repeat_interleave(n_rep, dim=1)
    qs = scale_grad(q, qk_share)
    ks = scale_grad(k, qk_share)
    scores = stabilize(torch.matmul(qs, ks.transpose(-1, -2)), qk_eps) * scale
    if score_softcap is not None:
        scores = softcap(scores, score_softcap, softcap_rule)
    if bias is not None:
        reads = bias_sinks is not None and any(t.requires_grad for t in bias_sinks)
        scores = scores + (_OnesBias.apply(bias, *bias_sinks) if reads else bias)
    valid = mask
    if causal:
        cm = _causal_mask(q.shape[2], q.device)
        valid = cm if valid is None else valid & cm
    if valid is not None:
        masked = stabilize(scores, mask_eps).masked_fill(~valid, torch.finfo(scores.dtype).min)
    else:
        masked = scores
    weights = softmax_weights(masked, q.dtype)
    if recorder is not None:
        recorder.add(masked, weights, valid, values=v, site=site)
    ws = scale_grad(weights, weights_share)
    vs = scale_grad(v, value_share)
    return stabilize(torch.matmul(ws, vs), av_eps)


def float32_at_least(dtype: torch.dtype) -> torch.dtype:
    """``max(dtype, float32)``: where a modeling file computes a step in float32 whatever the model's dtype (a vision
    tower's rotary products, Qwen2-VL), the twin computes it in float32 for half precision and keeps float64."""
    return torch.promote_types(dtype, torch.float32)


def router_dtype(dtype: torch.dtype) -> torch.dtype:
    """The precision a mixture-of-experts router computes its logits (where the family casts them), scores and gate
    values in: ``max(dtype, float32)``. transformers uses float32 for every model dtype, so in bfloat16 and float32
    the twin's router is the library's; a float64 model keeps float64 here (as the norm statistics do)."""
    return torch.promote_types(dtype, torch.float32)


ROUTER_RULES = ("gradient", "constant")


def router_gates(gates: torch.Tensor, logits: torch.Tensor, rule: str,
                 recorder: "AttentionRecorder | None" = None) -> torch.Tensor:
    """The gate values ``[B, T, k]`` a mixture-of-experts router hands its ``k`` chosen experts, under ``rule``
    (docs/engine.md, "Mixture of experts"). ``gates`` is the family's routing function of the router ``logits``
    ``[B, T, E]`` (softmax or sigmoid, gathered at the top-k choice, renormalised, scaled); the choice itself is an
    index, a constant under every rule.

    * ``"gradient"``: the routing function keeps its gradient. For a softmax router this IS AttnLRP's softmax rule
      (Prop. 3.1, ``R_z = z * grad`` of the true softmax): the renormalised top-k gates are the softmax of the chosen
      logits alone, the plain ones the full softmax read at the chosen entries; a sigmoid gate is the softmax of
      ``(z, 0)``; a renormalisation of sigmoid scores is the same normalisation as a softmax's. The product of a
      gate with its expert's output then takes the composite's product rule (uniform: half of the relevance to the
      gate, which passes it on to the logits and, through the router's linear map, to the stream).
    * ``"constant"``: the gates are detached (CP-LRP: gates are constants, all relevance flows through the experts).

    The router absorbs what enters its gates minus what leaves its logits, ``sum(g * grad_g) - sum(z * grad_z)``
    (the softmax rule keeps the difference; 0 under ``constant``): a recorder (``recorder``, else the one of the
    active :func:`attention_hooks` unless it traces) books it (:meth:`AttentionRecorder.absorbed`)."""
    if rule not in ROUTER_RULES:
        raise ValueError(f"unknown router rule {rule!r}; expected one of {', '.join(ROUTER_RULES)}")
    out = gates.detach() if rule == "constant" else gates
    if recorder is None:
        hooks = _HOOKS.get()
        recorder = None if hooks is None or hooks.recorder is None or hooks.recorder.trace else hooks.recorder
    if recorder is not None and not recorder.trace:
        recorder.add_router(logits, out)
    return out


def softmax_weights(scores: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Attention weights ``softmax(scores)`` of the eager path, returned in ``dtype``: computed in at least float32
    (as Hugging Face's eager attention does for half precision); float64 stays float64."""
    return torch.softmax(scores.to(torch.promote_types(dtype, torch.float32)), dim=-1).to(dtype)


def _causal_mask(t: int, device) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool, device=device).tril()
