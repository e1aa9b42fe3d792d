"""Emulations of numerical choices other implementations make, for tests that compare with them to float rounding.

palrp-bench's rules keep norm statistics and the eager softmax in ``max(dtype, float32)`` (float64 stays float64).
Hugging Face's modeling files (and lxt) compute them in float32 even for a float64 model (``LlamaRMSNorm``,
``Gemma*RMSNorm``, ``eager_attention_forward(..., softmax(dtype=float32))``), and lxt's identity rule divides by
``x + 1e-10``. Installing these stand-ins with pytest's ``monkeypatch`` (undone after each test) reproduces those
choices inside ``palrp_bench.lrp.rules`` only; no composite can express them, because composites choose rules, not
these numerical details.
"""
import torch

from palrp_bench.lrp import rules

LXT_IDENTITY_EPS = 1e-10  # lxt/efficient/rules.py, identity_rule_implicit_fn.forward(epsilon=1e-10)
_ORIGINAL_ACTIVATION = rules.activation


def lxt_identity_activation(x, fn, rule):
    """lxt's identity rule: forward ``fn(x)`` exactly, gradient ``fn(x) / (x + 1e-10)`` (ours: ``fn(x) / x``)."""
    if rule != "identity":
        return _ORIGINAL_ACTIVATION(x, fn, rule)
    y = fn(x)
    ratio = (y / (x + LXT_IDENTITY_EPS)).detach()
    return y.detach() + (x * ratio - (x * ratio).detach())


class TorchWithFloat32Statistics:
    """Stand-in for ``torch`` inside palrp_bench.lrp.rules only: ``promote_types(dtype, float32)`` -> float32.

    rules.py keeps RMSNorm statistics and the eager softmax in max(dtype, float32); transformers and lxt always use
    float32 there (``LlamaRMSNorm`` / lxt ``rms_norm_forward``, ``eager_attention_forward``; Gemma's whole norm).
    """

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def promote_types(a, b):
        return torch.float32


def emulate_library_float32_steps(monkeypatch) -> None:
    """Make the rules compute norm statistics and the eager softmax in float32, as transformers does."""
    monkeypatch.setattr(rules, "torch", TorchWithFloat32Statistics())
