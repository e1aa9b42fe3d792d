"""The stabilizers switch (palrp_bench/lrp/stabilizers.py): which set a choice resolves to, per protocol and family
(the default follows the family: official only where the official code ran it, LLaMA and DeiT).

Where each stabiliser applies is tested against slow references (tests/lrp/test_rules.py, tests/lrp/test_gamma.py,
tests/lrp/test_decoder_family_reference.py, tests/models/test_vit_twin.py); the official values against the
official code's outputs in tests/methods/test_official_agreement.py and tests/models/test_deit_official.py; the
default of a family the official code never ran against lxt in tests/methods/test_lxt_rope_families_agreement.py."""
import dataclasses

import pytest
import torch

from palrp_bench import explain
from palrp_bench.api import stabilizers_used
from palrp_bench.data.synthetic_vision import load_tiny_vit
from palrp_bench.errors import BadInputError
from palrp_bench.lrp import rules
from palrp_bench.lrp.stabilizers import NONE, OFFICIAL_NLP, OFFICIAL_VISION, Stabilizers, resolve_stabilizers
from palrp_bench.models.decoder import DECODER_SPECS, DecoderTwin, spec_for
from palrp_bench.models.registry import discover
from palrp_bench.models.vit import VitTwin
from palrp_bench.models.torchvision_vit import timm_from_torchvision
from palrp_bench.models.vit_rope import RopeVitTwin
from models.test_torchvision_vit import tiny_torchvision_vit
from models.test_vit_twin import make_vit
from models.tiny_families import FAMILIES, make_model, random_ids


@pytest.mark.parametrize("official", [OFFICIAL_NLP, OFFICIAL_VISION])
def test_choice_resolves_per_protocol_and_family(official):
    ran = dict(official=official, official_code_ran=True)
    assert resolve_stabilizers(None, protocol="official", **ran) is official
    assert resolve_stabilizers(None, protocol="corrected", **ran) is NONE
    assert resolve_stabilizers("official", protocol="corrected", **ran) is official
    assert resolve_stabilizers("none", protocol="official", **ran) is NONE
    custom = dataclasses.replace(official, name="custom", add=0.0)
    assert resolve_stabilizers(custom, protocol="official", **ran) is custom
    with pytest.raises(BadInputError, match="unknown stabilizers 'zennit'"):
        resolve_stabilizers("zennit", protocol="official", **ran)


@pytest.mark.parametrize("official", [OFFICIAL_NLP, OFFICIAL_VISION])
def test_a_family_the_official_code_never_ran_defaults_to_none_and_takes_official_on_request(official):
    never = dict(official=official, official_code_ran=False)
    for protocol in ("official", "corrected"):
        assert resolve_stabilizers(None, protocol=protocol, **never) is NONE
        assert resolve_stabilizers("official", protocol=protocol, **never) is official
        assert resolve_stabilizers("none", protocol=protocol, **never) is NONE


def test_a_family_without_an_official_set_defaults_to_none_and_refuses_official():
    for protocol in ("official", "corrected"):
        for ran in (False, True):
            assert resolve_stabilizers(None, protocol=protocol, official=None, official_code_ran=ran) is NONE
    none = dict(official=None, official_code_ran=False)
    assert resolve_stabilizers("none", protocol="official", **none) is NONE
    assert resolve_stabilizers(Stabilizers("zero"), protocol="official", **none).name == "zero"
    for choice in ("official", Stabilizers("mine", add=1e-3)):
        with pytest.raises(BadInputError, match="has no counterpart for Gpt2.*exist for decoders only"):
            resolve_stabilizers(choice, protocol="corrected", model="Gpt2", families="decoders", **none)


def test_each_family_has_its_official_set():
    assert DecoderTwin.official_stabilizers is OFFICIAL_NLP and VitTwin.official_stabilizers is OFFICIAL_VISION
    assert RopeVitTwin.official_stabilizers is None  # the official code never ran a RoPE ViT
    assert not NONE.active and OFFICIAL_NLP.active and OFFICIAL_VISION.active
    assert all(getattr(NONE, f.name) == 0.0 for f in dataclasses.fields(Stabilizers) if f.name != "name")


def test_the_official_code_ran_one_decoder_family():
    """The fact sits on the decoder specs: LLaMA (LLaMA-2, LLaMA-3.x, TinyLlama) only."""
    discover()
    assert {s.family for s in DECODER_SPECS.values() if s.official_code_ran} == {"llama"}


@pytest.mark.parametrize("kind", ["causal", "classifier"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_decoder_family_gets_its_default(family, kind):
    """protocol=official defaults to the official set on LLaMA only; corrected to none everywhere; an explicit
    ``official`` places the official NLP set on every decoder family."""
    model = make_model(family, kind)
    ran = family == "llama"
    assert spec_for(model).official_code_ran is ran
    assert stabilizers_used(model, "pa_lrp") == ("official" if ran else "none")
    assert stabilizers_used(model, "pa_lrp", protocol="corrected") == "none"
    for protocol in ("official", "corrected"):
        assert stabilizers_used(model, "pa_lrp", protocol=protocol, stabilizers="official") == "official"
        assert stabilizers_used(model, "pa_lrp", protocol=protocol, stabilizers="none") == "none"
    assert stabilizers_used(model, "grad_x_input", stabilizers="official") == "none"  # plain gradients


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_the_default_explanation_is_the_named_set(family):
    """What explain uses by default is exactly its named counterpart (and the two sets differ on this input)."""
    model = make_model(family)
    ids = random_ids(2, 9)
    default = explain(model, ids, method="attnlrp")
    expected = "official" if family == "llama" else "none"
    assert default.stabilizers == expected
    assert torch.equal(default.semantic, explain(model, ids, method="attnlrp", stabilizers=expected).semantic)
    other = explain(model, ids, method="attnlrp", stabilizers="none" if family == "llama" else "official")
    assert other.stabilizers != expected and not torch.equal(default.semantic, other.semantic)


def test_vision_defaults():
    """Every timm ViT counts as DeiT (the embedded tiny ViT, plain and distilled ViTs: official by default); the
    torchvision ViT (the AttnLRP paper's) defaults to none and takes the official set on request."""
    for model in (load_tiny_vit(), make_vit("plain", torch.float32), make_vit("distilled", torch.float32)):
        assert stabilizers_used(model, "pa_lrp") == "official"
        assert stabilizers_used(model, "pa_lrp", protocol="corrected") == "none"
    tv = timm_from_torchvision(tiny_torchvision_vit().float())
    assert stabilizers_used(tv, "pa_lrp") == stabilizers_used(tv, "pa_lrp", protocol="corrected") == "none"
    assert stabilizers_used(tv, "pa_lrp", stabilizers="official") == "official"
    x = torch.randn(1, 3, 32, 32)
    assert explain(tv, x, method="pa_lrp").stabilizers == "none"


def test_stabilize_backward_is_the_factor_and_zero_where_the_denominator_vanishes():
    """``z / (z + eps)`` per element, 0 where ``z + eps == 0`` (the official code would divide by zero there);
    the incoming gradient is not modified in place."""
    z = torch.tensor([2.0, -0.5, 0.0, -1e-3], dtype=torch.float64, requires_grad=True)
    grad = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    kept = grad.clone()
    (g,) = torch.autograd.grad(rules.stabilize(z, 1e-3), z, grad)
    assert torch.equal(grad, kept)
    expected = torch.tensor([2.0 / (2.0 + 1e-3), 2.0 * -0.5 / (-0.5 + 1e-3), 0.0, 0.0], dtype=torch.float64)
    assert torch.allclose(g, expected, rtol=1e-15, atol=0)


# ------------------------------------------------------------------------------ the fused backward (docs/engine.md)
def _slow_stabilized_grad(grad, z, eps):
    """The backward of ``stabilize`` before it was fused, kept as the reference: the factor in float64, zeroed
    where it is not finite, times the gradient (rounded to the dtype once, at the end)."""
    z64, g64 = z.double(), grad.double()
    eps_in_dtype = float(torch.tensor(eps, dtype=z.dtype))  # eager `z + eps` adds the scalar rounded to z's dtype
    factor = torch.div(z64, (z64 + eps_in_dtype).to(z.dtype).double())
    factor = torch.where(torch.isfinite(factor), factor, torch.zeros_like(factor))
    return factor * g64


def _hard_inputs(dtype, eps, shape=(3, 40, 50)):
    """Values around the denominator's zero (z = -eps exactly, within a few eps of it) and far from it, plus 0,
    NaN and inf."""
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(shape, generator=gen, dtype=torch.float64) * eps * 4
    flat = z.view(-1)
    flat[:50] = -eps
    flat[50:100] *= 1e6
    flat[100:103] = torch.tensor([0.0, float("nan"), float("inf")], dtype=torch.float64)
    return z.to(dtype), torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)


def _in_backward(grad, z, eps):
    """``rules.stabilized_grad`` as a backward pass calls it: with gradients off."""
    with torch.no_grad():
        return rules.stabilized_grad(grad, z, eps)


@pytest.fixture
def fresh_kernels(monkeypatch):
    """Empty kernel caches (compiled per device type, checked per device type and dtype) and a fresh dynamo cache,
    so that each test builds and checks its own kernels; every tensor takes the fused path."""
    monkeypatch.setattr(rules, "_COMPILED", {})
    monkeypatch.setattr(rules, "_FUSED", {})
    monkeypatch.setattr(rules, "FUSED_MIN_ELEMENTS", 0)  # the tests' small tensors take the compiled kernel too
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _fused_on_cpu_or_skip(monkeypatch):
    """Compiled stabilisers on the CPU (``PALRP_FUSED_STABILIZERS=compile``, fresh kernel caches), or a skip where
    torch.compile cannot build a CPU kernel here (no C++ compiler)."""
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "compile")
    monkeypatch.setattr(rules, "_COMPILED", {})
    monkeypatch.setattr(rules, "_FUSED", {})
    monkeypatch.setattr(rules, "FUSED_MIN_ELEMENTS", 0)  # the tests' small tensors take the compiled kernel too
    torch._dynamo.reset()  # no graphs of other tests count towards dynamo's recompile limit
    _in_backward(torch.ones(3), torch.ones(3), 1e-6)
    if rules._COMPILED.get("cpu") is None:
        pytest.skip("torch.compile cannot build a CPU kernel here (no C++ compiler, or inductor's C++ does not build "
                    "for these kernels, e.g. ATEN_CPU_CAPABILITY=default; the fused path is CUDA's default)")


def _assert_equal_to_rounding(fused, reference, dtype, z):
    """Element by element within 2 ulp of ``dtype`` (relative), zeros and non-finite values where the reference
    has them; NaN nowhere. The message names the worst element."""
    assert fused.dtype == dtype and not torch.isnan(fused).any()
    ulp = torch.finfo(dtype).eps
    difference = (fused.double() - reference).abs()
    relative = torch.nan_to_num(difference / reference.abs(), nan=0.0).reshape(-1)  # inf where the reference is 0
    worst = int(relative.argmax())
    message = (f"worst relative difference {float(relative[worst]):.3g} at z={float(z.reshape(-1)[worst]):.6g}: "
               f"{float(fused.reshape(-1)[worst]):.6g} vs reference {float(reference.reshape(-1)[worst]):.6g}")
    assert bool((difference <= 2 * ulp * reference.abs()).all()), message
    assert torch.equal(fused == 0, reference == 0), message


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("mode", ["off", "compile"])
def test_the_stabiliser_backward_equals_the_slow_reference_to_rounding(dtype, mode, monkeypatch):
    if mode == "compile":
        _fused_on_cpu_or_skip(monkeypatch)
    else:
        monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "off")
    for eps in (1e-8, 0.5e-6, 1e-5):
        z, grad = _hard_inputs(dtype, eps)
        leaf = z.clone().requires_grad_(True)
        out = rules.stabilize(leaf, eps)
        torch.testing.assert_close(out, z, rtol=0, atol=0, equal_nan=True)  # the forward: the value, bit for bit
        (g,) = torch.autograd.grad(out, leaf, grad)
        _assert_equal_to_rounding(g, _slow_stabilized_grad(grad, z, eps), dtype, z)
    if mode == "compile":  # the compiled kernel passed the probe and answered, not the eager fallback
        assert rules._FUSED[("cpu", dtype)] is rules._COMPILED["cpu"] is not None


def test_an_explanation_with_fused_stabilisers_equals_the_eager_one(monkeypatch):
    """The official stabilisers at every place of a tiny LLaMA, compiled and eager: the same scores to float32
    rounding (the forward is untouched: the same logit)."""
    model = make_model("llama")
    ids = random_ids(2, 9)
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "off")
    eager = explain(model, ids, method="pa_lrp", stabilizers="official")
    _fused_on_cpu_or_skip(monkeypatch)
    fused = explain(model, ids, method="pa_lrp", stabilizers="official")
    assert rules._FUSED[("cpu", torch.float32)] is not None
    assert torch.equal(fused.logit, eager.logit)
    scale = eager.scores.abs().max()
    torch.testing.assert_close(fused.scores, eager.scores, rtol=0, atol=64 * torch.finfo(torch.float32).eps * scale)


def test_auto_compiles_on_cuda_only_and_off_never(monkeypatch, fresh_kernels):
    compiled, checked = [], []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append(kw) or fn)
    monkeypatch.setattr(rules, "_check_kernel", lambda kernel, device, dtype, eps=(): checked.append(
        (device.type, dtype, tuple(eps))) or kernel)
    monkeypatch.delenv(rules.FUSED_STABILIZERS_ENV, raising=False)
    assert rules.fused_stabilizers() == "auto"
    assert rules._fused_kernel("cpu", torch.float32) is None and not compiled
    assert rules._fused_kernel("cuda", torch.bfloat16, 1e-6) is rules._stabilized_grad and compiled == [
        {"dynamic": True, "fullgraph": True, "options": {"emulate_precision_casts": True}}]
    assert rules._fused_kernel("cuda:1", torch.bfloat16) is rules._stabilized_grad  # checked once per type and dtype
    assert rules._fused_kernel("cuda", torch.float32) is rules._stabilized_grad and len(compiled) == 1
    assert checked == [("cuda", torch.bfloat16, (1e-6,)), ("cuda", torch.float32, ())]
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "off")
    assert rules._fused_kernel("cuda", torch.bfloat16) is None
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "fast")
    with pytest.raises(BadInputError, match="PALRP_FUSED_STABILIZERS='fast'") as err:
        rules.fused_stabilizers()
    assert "auto, compile, off" in err.value.fix and "\n" not in str(err.value)


def test_small_tensors_take_the_eager_expression(monkeypatch):
    """Below FUSED_MIN_ELEMENTS the compiled call would cost more host time than the four eager passes."""
    calls = []
    monkeypatch.setattr(rules, "_FUSED", {("cpu", torch.float32): lambda *a: calls.append(a)
                                          or rules._stabilized_grad(*a)})
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "compile")
    monkeypatch.setattr(rules, "FUSED_MIN_ELEMENTS", 100)
    z, grad = torch.randn(99), torch.randn(99)
    assert torch.equal(_in_backward(grad, z, 1e-6), rules._stabilized_grad(grad, z, torch.tensor(1e-6)))
    assert not calls
    z, grad = torch.randn(10, 10), torch.randn(10, 10)
    assert _in_backward(grad, z, 1e-6).shape == (10, 10) and len(calls) == 1
    assert calls[0][0].shape == (100,)  # flat: one compiled graph per dtype, whatever the rank
    assert calls[0][2].shape == () and calls[0][2].dtype == torch.float32  # eps: a tensor of z's dtype
    # a backward that is itself differentiated (create_graph=True) keeps the eager, differentiable expression
    leaf = z.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(rules.stabilize(leaf, 1e-6), leaf, grad.requires_grad_(True), create_graph=True)
    assert g.requires_grad and len(calls) == 1


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def test_a_kernel_that_fails_leaves_the_eager_expression_with_one_warning(monkeypatch, caplog, fresh_kernels):
    calls = []

    def broken(*args):
        calls.append(args)
        raise RuntimeError("no C++ compiler found\nlong traceback")

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: broken)
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "compile")
    z, grad = _hard_inputs(torch.float32, 1e-6)
    with caplog.at_level("WARNING", logger=rules.__name__):
        first = _in_backward(grad, z, 1e-6)
        second = _in_backward(grad, z, 1e-6)
        third = _in_backward(grad.double(), z.double(), 1e-6)  # the device type is dropped: all dtypes
    assert len(calls) == 1 and rules._COMPILED == {"cpu": None}
    assert rules._FUSED == {("cpu", torch.float32): None, ("cpu", torch.float64): None}
    assert torch.equal(first, rules._stabilized_grad(grad, z, torch.tensor(1e-6))) and torch.equal(first, second)
    assert torch.equal(third, rules._stabilized_grad(grad.double(), z.double(), torch.tensor(1e-6, dtype=torch.float64)))
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "RuntimeError: no C++ compiler found" in warnings[0] and "\n" not in warnings[0]


def _unrounded_eps_kernel(grad, z, eps):
    """A deliberately wrong kernel: it adds ``eps`` in float32 without rounding it to ``z``'s dtype first (1 ulp
    of float32 off the value eager adds), so its denominator misses zero at ``z = -eps``: a large finite factor
    where the eager expression gives 0 (and 0 where it gives a large one) -- the kind of bug the bfloat16 CUDA
    kernel had."""
    den = z.float() + eps.float() * (1 + torch.finfo(torch.float32).eps)
    factor = torch.div(z.float(), den).nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return (factor * grad.float()).to(z.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_that_differs_from_the_eager_expression_is_dropped_before_use(dtype, monkeypatch, caplog,
                                                                               fresh_kernels):
    """The guard on the CPU with a deliberately wrong kernel: it is checked on the probe before its first use,
    disagrees at ``z = -eps``, is dropped with one warning, and every result is the eager expression's, bit for
    bit (the same check runs on CUDA, where the compiled kernel is the default)."""
    calls = []

    def wrong(grad, z, eps):
        calls.append(z.shape)
        return _unrounded_eps_kernel(grad, z, eps)

    monkeypatch.setattr(torch, "compile", lambda fn, **kw: wrong)
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "compile")
    z, grad = _hard_inputs(dtype, 1e-6)
    with caplog.at_level("WARNING", logger=rules.__name__):
        first = _in_backward(grad, z, 1e-6)
        leaf = z.clone().requires_grad_(True)
        (second,) = torch.autograd.grad(rules.stabilize(leaf, 0.5e-6), leaf, grad)
    eager = rules._stabilized_grad(grad, z, torch.tensor(1e-6, dtype=dtype))
    assert torch.equal(first, eager)
    assert torch.equal(second, rules._stabilized_grad(grad, z, torch.tensor(0.5e-6, dtype=dtype)))
    assert rules._FUSED == {("cpu", dtype): None} and rules._COMPILED["cpu"] is wrong
    assert calls and all(shape != z.shape for shape in calls) and len(calls) == 1  # the probe's first eps only
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "\n" not in warnings[0], warnings
    assert f"fused stabilisers on cpu in {str(dtype)[6:]} differ from the eager expression" in warnings[0]
    assert "eager 0" in warnings[0]  # the first disagreement: z = -eps, where eager gives 0
    # the wrong kernel would have answered differently on these inputs: the guard is what kept it out
    assert not torch.equal(_unrounded_eps_kernel(grad.reshape(-1), z.reshape(-1), torch.tensor(1e-6, dtype=dtype)),
                           eager.reshape(-1))


def test_one_graph_per_dtype_serves_every_eps_and_size(monkeypatch, fresh_kernels):
    """``eps`` is a tensor input and sizes are dynamic: the probe and every later call of a dtype share one graph
    (dynamo's frame count, with a counting backend in place of inductor)."""
    from torch._dynamo.testing import CompileCounter

    counter = CompileCounter()
    real_compile = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, dynamic, fullgraph, options: real_compile(
        fn, backend=counter, dynamic=dynamic, fullgraph=fullgraph))
    monkeypatch.setenv(rules.FUSED_STABILIZERS_ENV, "compile")
    for dtype in (torch.float32, torch.bfloat16):
        for eps in (1e-8, 0.5e-6, 1e-5, 3e-3):
            for shape in ((7, 11), (5, 300), (4096,)):
                z, grad = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
                got = _in_backward(grad, z, eps)
                assert torch.equal(got, rules._stabilized_grad(grad, z, torch.tensor(eps, dtype=dtype)))
        assert rules._FUSED[("cpu", dtype)] is not None
    assert counter.frame_count == 2


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_fused_cuda_kernel_equals_the_slow_reference_to_rounding(dtype, monkeypatch, caplog, fresh_kernels):
    """The compiled CUDA kernel passes the probe (it is not dropped) and equals the slow reference to rounding; the
    CPU twin is the ``compile`` case of the test above (the same probe and guard)."""
    monkeypatch.delenv(rules.FUSED_STABILIZERS_ENV, raising=False)  # auto: compiled on CUDA
    with caplog.at_level("WARNING", logger=rules.__name__):
        for eps in (1e-8, 0.5e-6):
            z, grad = _hard_inputs(dtype, eps)
            z, grad = z.cuda(), grad.cuda()
            g = _in_backward(grad, z, eps)
            _assert_equal_to_rounding(g.cpu(), _slow_stabilized_grad(grad.cpu(), z.cpu(), eps), dtype, z.cpu())
    assert rules._FUSED[("cuda", dtype)] is not None, f"the compiled kernel was dropped on CUDA: {_warnings(caplog)}"
