"""The generalised LRP gamma rule as a forward-identical autograd op (docs/protocol.md section 1; docs/design.md
section 2,
row "linear / conv in ViTs").

The rule (Montavon et al. 2019, "Layer-wise relevance propagation: an overview", generalised to signed inputs by
Andeol et al. 2021; the form Zennit >= 0.5 implements as ``zennit.rules.Gamma``, which the official PA-LRP vision
code applies to the head and MLP linears with ``gamma = 0.05`` and to the patch-embedding conv with
``gamma = 100``). For an affine map ``z_j = sum_i x_i w_ji + b_j`` and ``gamma >= 0``, write
``w+ = max(w, 0)``, ``w- = min(w, 0)`` (likewise ``x+``, ``x-``, ``b+``, ``b-``) and::

    w_up   = w + gamma * w+          w_down = w + gamma * w-

    output z_j > 0:  D+_j = sum_i (x+_i w_up_ji + x-_i w_down_ji) + b_j + gamma * b+_j
                     R_i += (x+_i w_up_ji + x-_i w_down_ji) / D+_j * R_j
    output z_j < 0:  D-_j = sum_i (x+_i w_down_ji + x-_i w_up_ji) + b_j + gamma * b-_j
                     R_i += (x+_i w_down_ji + x-_i w_up_ji) / D-_j * R_j
    output z_j = 0:  nothing flows.

Contributions that have the sign of the output are amplified by ``1 + gamma``; the bias share
``(b_j + gamma * b+-_j) / D_j * R_j`` is absorbed (so the rule conserves exactly when the bias is zero).
``gamma = 0`` is the epsilon rule with ``eps -> 0`` (plain Gradient x Input). Because ``|D+-_j| >= |z_j|`` (every
added term has the sign of the output) the denominators never vanish where relevance flows, so no stabiliser is
needed; ``stabilizer > 0`` adds Zennit's sign-aware ``eps`` (Zennit's default is ``1e-6``) for bit-level
comparisons with it.

Gradient x Input form (docs/design.md section 1): the op's forward is exactly ``F.linear`` / ``F.conv2d``; its
backward receives
``g = dL/dz`` and, since ``R_j = z_j * g_j`` in this framework, returns the modified gradient::

    s+_j = [z_j > 0] z_j g_j / D+_j         s-_j = [z_j < 0] z_j g_j / D-_j
    grad_i = (s+ @ w_up  + s- @ w_down)_i   where x_i > 0
             (s+ @ w_down + s- @ w_up )_i   where x_i < 0      (0 where x_i = 0)

so that ``x * grad`` is exactly the gamma-rule relevance of the input. Weights and bias receive no gradient (they
are not relevance sinks and the wrapped model's ``.grad`` stays untouched).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["gamma_linear", "gamma_conv2d", "gamma_module"]


def _stabilise(d: torch.Tensor, eps: float) -> torch.Tensor:
    """Zennit's stabiliser: ``d + eps * sign(d)`` with ``sign(0) = +1``."""
    if eps == 0.0:
        return d
    return d + ((d == 0).to(d) + d.sign()) * eps


def _gamma_linear_input_grad(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, z: torch.Tensor,
                             grad_z: torch.Tensor, gamma: float, stabilizer: float) -> torch.Tensor:
    """Modified input gradient of the generalised gamma rule (module docstring) for ``z = x @ weight.T + bias``.

    ``x`` ``[..., I]``, ``weight`` ``[J, I]``, ``z`` / ``grad_z`` ``[..., J]``. The positive and negative input
    parts are stacked along the feature axis, so each denominator takes one matmul and the gradient two.
    """
    w_up = weight + gamma * weight.clamp(min=0)
    w_down = weight + gamma * weight.clamp(max=0)
    w_for_pos = torch.cat([w_up, w_down], dim=1)    # positive outputs: x+ with w_up, x- with w_down
    w_for_neg = torch.cat([w_down, w_up], dim=1)    # negative outputs: x+ with w_down, x- with w_up
    x_split = torch.cat([x.clamp(min=0), x.clamp(max=0)], dim=-1)
    d_pos = x_split @ w_for_pos.T
    d_neg = x_split @ w_for_neg.T
    if bias is not None:
        d_pos = d_pos + (bias + gamma * bias.clamp(min=0))
        d_neg = d_neg + (bias + gamma * bias.clamp(max=0))
    relevance = z * grad_z
    # where an output has the other sign (or is 0) its denominator is unused: a 0 there gives inf/nan that
    # torch.where discards (no gradient is taken through this computation)
    s_pos = torch.where(z > 0, relevance / _stabilise(d_pos, stabilizer), 0.0)
    s_neg = torch.where(z < 0, relevance / _stabilise(d_neg, stabilizer), 0.0)
    grad_split = s_pos @ w_for_pos + s_neg @ w_for_neg
    n = x.shape[-1]
    return torch.where(x > 0, grad_split[..., :n], torch.where(x < 0, grad_split[..., n:], 0.0))


class _GammaLinear(torch.autograd.Function):
    """``F.linear`` forward; generalised gamma rule backward (module docstring)."""

    @staticmethod
    def forward(ctx, x, weight, bias, gamma: float, stabilizer: float):  # noqa: D401
        z = F.linear(x, weight, bias)
        ctx.save_for_backward(x, weight, bias, z)
        ctx.gamma = gamma
        ctx.stabilizer = stabilizer
        return z

    @staticmethod
    def backward(ctx, grad_z):
        x, weight, bias, z = ctx.saved_tensors
        grad_x = _gamma_linear_input_grad(x, weight, bias, z, grad_z, ctx.gamma, ctx.stabilizer)
        return grad_x, None, None, None, None


class _GammaConv2d(torch.autograd.Function):
    """``F.conv2d`` forward; generalised gamma rule backward (module docstring).

    The backward applies the linear rule to every receptive field (``F.unfold``: a conv is a linear map per output
    position) and sums the input gradients of overlapping fields (``F.fold``), as Zennit's hook on a conv does.
    """

    @staticmethod
    def forward(ctx, x, weight, bias, gamma: float, stabilizer: float, stride, padding, dilation):
        z = F.conv2d(x, weight, bias, stride, padding, dilation)
        ctx.save_for_backward(x, weight, bias, z)
        ctx.gamma = gamma
        ctx.stabilizer = stabilizer
        ctx.conv = (stride, padding, dilation)
        return z

    @staticmethod
    def backward(ctx, grad_z):
        x, weight, bias, z = ctx.saved_tensors
        stride, padding, dilation = ctx.conv
        kernel = tuple(weight.shape[-2:])
        b, out_channels = z.shape[:2]
        cols = F.unfold(x, kernel, dilation=dilation, padding=padding, stride=stride).transpose(1, 2)
        z_cols = z.reshape(b, out_channels, -1).transpose(1, 2)
        g_cols = grad_z.reshape(b, out_channels, -1).transpose(1, 2)
        grad_cols = _gamma_linear_input_grad(cols, weight.reshape(out_channels, -1), bias, z_cols, g_cols,
                                             ctx.gamma, ctx.stabilizer)
        grad_x = F.fold(grad_cols.transpose(1, 2), tuple(x.shape[-2:]), kernel, dilation=dilation,
                        padding=padding, stride=stride)
        return grad_x, None, None, None, None, None, None, None


def _check_gamma(gamma: float) -> float:
    gamma = float(gamma)
    if not gamma >= 0.0:
        raise ValueError(f"gamma must be >= 0 for the gamma rule, got {gamma}")
    return gamma


def gamma_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gamma: float, *,
                 stabilizer: float = 0.0) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` whose backward is the generalised gamma rule (module docstring).

    Relevance reaching the output as ``z * grad_z`` leaves through ``x * grad_x`` redistributed by the rule.
    """
    gamma = _check_gamma(gamma)
    if not x.requires_grad:
        return F.linear(x, weight, bias)
    return _GammaLinear.apply(x, weight.detach(), None if bias is None else bias.detach(), gamma, float(stabilizer))


def gamma_conv2d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gamma: float, *,
                 stride=1, padding=0, dilation=1, groups: int = 1, stabilizer: float = 0.0) -> torch.Tensor:
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` with the generalised gamma rule backward.

    Works for any stride / padding / dilation (overlapping receptive fields included; ``groups=1``): the rule is
    applied per output position and the input gradients of overlapping windows add up, as in Zennit.
    """
    gamma = _check_gamma(gamma)
    if isinstance(padding, str):
        raise ValueError(f"gamma_conv2d needs numeric padding, got {padding!r}")
    if groups != 1:
        raise ValueError(f"gamma_conv2d supports groups=1 only, got groups={groups}")
    if not x.requires_grad:
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    return _GammaConv2d.apply(x, weight.detach(), None if bias is None else bias.detach(), gamma, float(stabilizer),
                              stride, padding, dilation)


def gamma_module(module: nn.Module, x: torch.Tensor, gamma: float | None, *, stabilizer: float = 0.0) -> torch.Tensor:
    """Call an ``nn.Linear`` / ``nn.Conv2d`` ``module`` on ``x`` under the gamma rule (``gamma=None``: call the module
    itself, i.e. the epsilon rule with ``eps -> 0``; any linear implementation, e.g. bitsandbytes, works then).
    ``stabilizer``: Zennit's sign-aware eps of the gamma rule (module docstring); unused when ``gamma`` is None."""
    if gamma is None:
        return module(x)
    if isinstance(module, nn.Conv2d):
        if module.padding_mode != "zeros":
            raise ValueError(f"gamma rule supports zero-padded convolutions only, got {module.padding_mode!r}")
        return gamma_conv2d(x, module.weight, module.bias, gamma, stride=module.stride, padding=module.padding,
                            dilation=module.dilation, groups=module.groups, stabilizer=stabilizer)
    if isinstance(module, nn.Linear) and type(module.weight) is nn.Parameter:
        return gamma_linear(x, module.weight, module.bias, gamma, stabilizer=stabilizer)
    raise ValueError(f"the gamma rule needs a plain nn.Linear or nn.Conv2d, got {type(module).__name__}")
