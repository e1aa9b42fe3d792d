"""Agreement with the official PA-LRP code (its outputs on tiny models, tests/data/official/nlp, produced by
github.com/YardenBakish/PE-AWARE-LRP at 51eb418 -- an AttnLRP (lxt) fork, so its `attnlrp` row is also the AttnLRP
authors' rule set; docs/engine.md, "Agreement with the official code").

The official rules carry epsilon-rule stabilisers (linears 1e-8, adds 1e-8, Q K^T 1e-8, A @ V 1e-6:
``OFFICIAL_NLP`` in palrp_bench/lrp/stabilizers.py). ``stabilizers="official"``, the default under
``protocol="official"``, reproduces them. The exact rules (``stabilizers="none"``) differ by up to ~1e-3, and
dropping any one stabiliser breaks the agreement (tests below), so the tolerance sees each of them.

float32 fixtures (tests/reference/conditioning.py): our float64 scores and terms are the exact ones, so their
distance to the official float32 arrays is the official run's own float32 rounding, the same on every machine:
measured <= 8.3e-7 for the token scores with ``attention="eager"`` (9.6e-7 on the default fused path, which also
leaves out the two stabilisers on the score matrix), <= 2.1e-6 for the semantic sums and per-layer cos / sin terms
(``OFFICIAL_ROUNDING`` = 2.5e-6 bounds them). Our float32 arrays are judged on the well-conditioned sequences only
(our float32 vs float64 <= ``COND``, at least 2 of 3; 3 of 3 here) and must agree to our float32 rounding of the
sequence + ``OFFICIAL_ROUNDING``, the worst case two float32 roundings can produce; ``COND`` = 1e-5 -
``OFFICIAL_ROUNDING`` keeps that within the issue's 1e-5 (``TOL``). Measured here (AMD EPYC; native = AVX2 and
``ATEN_CPU_CAPABILITY=default``): our float32 rounding <= 1.7e-6 for the scores and <= 5.8e-6 for the terms (the
cos term of the second non-causal sequence: 5.8e-6 with AVX2, 2.6e-6 with the default kernels, so a CPU's kernels
can move it towards the 1e-5 requirement); agreement <= 1.0e-6 (scores), <= 3.7e-6 (terms).

The float64 fixture is not float64 throughout: the official run computes the RMSNorm (as Hugging Face does) and
the attention softmax with its relevance rule (``attn_weights.float()``) in float32, and sums the token relevance
in float32 (``input_embeds.grad.float().sum(-1)``, likewise for cos/sin), so its token scores are float32 numbers
and agree to float32 rounding only (``F64_FIXTURE_TOL``; measured 3.3e-7). With the two forward stages emulated
(test-only), the semantic and positional sums -- stored in float64 by the fixture -- agree to <= 1e-9 (measured
6e-16) wherever this CPU's float32 kernels round as the fixture machine's did (detected per sequence by a
bit-identical logit); float32 reduction order differs between instruction sets (AVX2 vs AVX-512), and where it
does the float32 rounding (~3e-7) remains.
"""
import dataclasses
import json

import numpy as np
import pytest
import torch
import transformers

from conftest import OFFICIAL
from palrp_bench import explain
from palrp_bench.lrp import rules
from palrp_bench.lrp.stabilizers import OFFICIAL_NLP
from reference.conditioning import judged_samples

NLP = OFFICIAL / "nlp"
KEYS = {"attnlrp": "attnlrp", "pe_only": "pe_only", "pa_lrp": "pa_lrp", "pa_lrp_no_multisink": "pa_lrp_no_abs"}
CASES = [  # fixture, model folder, ids, dtype, causal
    ("nlp_causal_fixed.npz", "llama_causal", "ids_causal.json", torch.float32, True),
    ("nlp_causal_fixed_f64.npz", "llama_causal", "ids_causal.json", torch.float64, True),
    ("nlp_causal_official_noncausal.npz", "llama_causal", "ids_causal.json", torch.float32, False),
    ("nlp_cls.npz", "llama_cls", "ids_cls.json", torch.float32, True),
]
# float32: the requirement. float64 fixture: 16 float32 ulps, the fixture's own float32 stages (docstring).
TOL = {torch.float32: 1e-5, torch.float64: 16 * torch.finfo(torch.float32).eps}
F64_FIXTURE_TOL = TOL[torch.float64]
EMULATED_F64_TOL = 1e-9  # the requirement for the float64 fixture, met with the float32 stages emulated
OFFICIAL_ROUNDING = 2.5e-6  # the float32 fixtures' own rounding: <= 2.1e-6 from our float64 arrays (docstring)
COND = TOL[torch.float32] - OFFICIAL_ROUNDING  # a sequence is judged when our float32 and float64 agree to this
MIN_JUDGED = 2  # of the fixtures' 3 sequences
FLOAT32_CASES = [case for case in CASES if case[3] == torch.float32]
_models = {}


def load(folder, dtype):
    key = (folder, dtype)
    if key not in _models:
        cls = transformers.LlamaForSequenceClassification if folder == "llama_cls" else transformers.LlamaForCausalLM
        _models[key] = cls.from_pretrained(NLP / folder, dtype=dtype).eval()
    return _models[key]


def rel_err(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def sequences(ids_file):
    return json.loads((NLP / ids_file).read_text())


def score_errors(fixture, folder, ids_file, dtype, causal, methods=tuple(KEYS), against=None, **options):
    """Per sequence: the worst over methods of the relative difference of our token scores (model in ``dtype``) to
    the official ones, or, with ``against`` (a dtype), to ours with the model in that dtype."""
    ref = np.load(NLP / fixture)
    model = load(folder, dtype)
    off = ref["offsets"]
    worst = []
    for i, seq in enumerate(sequences(ids_file)):
        rels = []
        for method in methods:
            rel = explain(model, torch.tensor([seq]), method=method, causal=causal, **options)
            assert int(rel.target[0]) == int(ref["pred"][i])
            assert abs(float(rel.logit[0]) - float(ref["logit"][i])) < 1e-5
            if against is None:
                theirs = ref[KEYS[method]][off[i]:off[i + 1]]
            else:
                theirs = explain(load(folder, against), torch.tensor([seq]), method=method, causal=causal,
                                 **options).scores[0].double()
            rels.append(rel_err(rel.scores[0].double(), theirs))
        worst.append(max(rels))
    return worst


def worst_score_error(fixture, folder, ids_file, dtype, causal, methods=tuple(KEYS), **options):
    """Max over methods and sequences of the relative difference of the token scores to the official ones."""
    return max(score_errors(fixture, folder, ids_file, dtype, causal, methods, **options))


def assert_judged_agreement(fixture, agreement, rounding):
    """Float32 against a float32 fixture: on the well-conditioned sequences, at most our float32 rounding of the
    sequence plus the fixture's (module docstring). Returns the judged sequences."""
    judged, line = judged_samples(rounding, COND, MIN_JUDGED, fixture)
    for i in judged:
        bound = rounding[i] + OFFICIAL_ROUNDING
        assert agreement[i] <= bound, f"{line}; sequence {i}: {agreement[i]:.2e} > {bound:.2e}"
    return judged


def assert_scores_match(fixture, folder, ids_file, dtype, causal, methods=tuple(KEYS), **options):
    case = (fixture, folder, ids_file, dtype, causal)
    agreement = score_errors(*case, methods=methods, **options)
    if dtype == torch.float64:  # our float64 model, the float64 fixture's float32 stages (docstring)
        assert max(agreement) <= F64_FIXTURE_TOL, agreement
    else:
        assert_judged_agreement(fixture, agreement, score_errors(*case, methods=methods, against=torch.float64,
                                                                 **options))


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", FLOAT32_CASES)
def test_float32_fixtures_are_float32_roundings_of_our_float64_scores(fixture, folder, ids_file, dtype, causal,
                                                                       attention):
    """Our float64 token scores vs the official float32 ones, every sequence, the same on every machine: measured
    <= 8.3e-7 (eager), 9.6e-7 (fused) <= ``OFFICIAL_ROUNDING``."""
    errors = score_errors(fixture, folder, ids_file, torch.float64, causal, attention=attention)
    assert max(errors) <= OFFICIAL_ROUNDING, errors


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
@pytest.mark.parametrize("method", sorted(KEYS))
def test_scores_match_official(fixture, folder, ids_file, dtype, causal, method):
    """protocol=official (stabilizers="official" by default), the official eager attention: measured <= 8.7e-7
    (float32, well-conditioned sequences, against bounds >= 2.6e-6), 3.3e-7 (float64)."""
    assert_scores_match(fixture, folder, ids_file, dtype, causal, methods=(method,), attention="eager")


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
def test_scores_match_official_on_the_fused_path(fixture, folder, ids_file, dtype, causal):
    """The default fused attention leaves out the Q K^T and mask-add stabilisers: measured <= 1.0e-6 (float32,
    well-conditioned sequences), 9.0e-7 (float64 fixture, within the float32 requirement ``TOL``)."""
    if dtype == torch.float64:
        assert worst_score_error(fixture, folder, ids_file, dtype, causal) <= TOL[torch.float32]
    else:
        assert_scores_match(fixture, folder, ids_file, dtype, causal)


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
def test_exact_rules_differ_by_the_official_stabilisers(fixture, folder, ids_file, dtype, causal):
    """Without the stabilisers the same comparison fails (measured 6.6e-5 .. 9.8e-4), so it can."""
    worst = worst_score_error(fixture, folder, ids_file, dtype, causal, stabilizers="none", attention="eager")
    assert 5 * TOL[dtype] < worst < 2e-3


@pytest.mark.parametrize("field", ["linear", "add", "av"])
def test_each_stabiliser_the_float32_fixture_sees_is_needed(field):
    """Classifier fixture, one official stabiliser removed: measured linear 4.6e-5, add 1.8e-5, av 6.9e-5 (> TOL).
    Q K^T's (3e-8 .. 4e-7) is below float32 resolution; the float64 emulation test below sees it."""
    stab = dataclasses.replace(OFFICIAL_NLP, **{field: 0.0})
    assert worst_score_error(*CASES[3], stabilizers=stab, attention="eager") > TOL[torch.float32]


def term_errors(fixture, folder, ids_file, dtype, causal, against=None):
    """Per sequence (eager attention): the worst relative difference of the semantic sums of both passes and of the
    per-layer cos / sin terms to the official ones (or, with ``against``, to ours with the model in that dtype), and
    the difference of the official ledger totals relative to the logit."""
    ref = np.load(NLP / fixture)
    off = ref["offsets"]

    def terms(model, seq):
        base = explain(model, torch.tensor([seq]), method="attnlrp", causal=causal, attention="eager")
        pa = explain(model, torch.tensor([seq]), method="pa_lrp", causal=causal, attention="eager")
        return [t.double() for t in (base.semantic[0], pa.semantic[0], pa.positional[0, :, 0],
                                     pa.positional[0, :, 1])]

    worst, ledger = [], []
    for i, seq in enumerate(sequences(ids_file)):
        sl = slice(off[i], off[i + 1])
        ours = terms(load(folder, dtype), seq)
        theirs = (terms(load(folder, against), seq) if against is not None else
                  [ref["sem_attnlrp"][sl], ref["sem_pe"][sl], ref["pos_cos"][:, sl], ref["pos_sin"][:, sl]])
        worst.append(max(rel_err(o, t) for o, t in zip(ours, theirs)))
        # the official ledger: sum(sem) + sum(pos) = logit - absorbed_softmax - eps_leak; with the same stabilisers
        # the leak and the softmax absorption are the same: totals agree to 6.5e-7 of the logit (6.1e-5 without)
        ours_total = float(ours[1].sum() + ours[2].sum() + ours[3].sum())
        official_total = float(ref["sem_pe"][sl].sum() + ref["pos_cos"][:, sl].sum() + ref["pos_sin"][:, sl].sum())
        ledger.append(abs(ours_total - official_total) / abs(float(ref["logit"][i])))
    return worst, ledger


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", CASES)
def test_semantic_and_positional_terms_match_official(fixture, folder, ids_file, dtype, causal):
    """Semantic sums of both passes, per-layer cos / sin terms: float32 on the well-conditioned sequences (measured
    <= 3.7e-6 against bounds >= 2.6e-6 + our rounding), float64 fixture <= ``F64_FIXTURE_TOL``; ledger totals
    within 5e-6 of the logit (measured 6.5e-7)."""
    worst, ledger = term_errors(fixture, folder, ids_file, dtype, causal)
    judged = range(len(worst))
    if dtype == torch.float64:
        assert max(worst) <= F64_FIXTURE_TOL, worst
    else:
        rounding, _ = term_errors(fixture, folder, ids_file, dtype, causal, against=torch.float64)
        judged = assert_judged_agreement(fixture, worst, rounding)
    assert all(ledger[i] < 5e-6 for i in judged), ledger


@pytest.mark.parametrize("fixture,folder,ids_file,dtype,causal", FLOAT32_CASES)
def test_float32_fixtures_are_float32_roundings_of_our_float64_terms(fixture, folder, ids_file, dtype, causal):
    """Our float64 semantic sums and cos / sin terms vs the official float32 ones, every sequence, the same on every
    machine: measured <= 2.1e-6 <= ``OFFICIAL_ROUNDING``."""
    worst, _ = term_errors(fixture, folder, ids_file, torch.float64, causal)
    assert max(worst) <= OFFICIAL_ROUNDING, worst


def test_float64_fixture_scores_are_float32_numbers():
    """Why the float64 fixture's token scores agree to float32 rounding only: the official run sums the relevance in
    float32, so every raw AttnLRP score is a float32 value, unlike the fixture's float64 semantic sums."""
    ref = np.load(NLP / "nlp_causal_fixed_f64.npz")
    assert np.array_equal(ref["attnlrp"].astype(np.float32).astype(np.float64), ref["attnlrp"])
    assert not np.array_equal(ref["sem_attnlrp"].astype(np.float32).astype(np.float64), ref["sem_attnlrp"])


# ---------------------------------------------------------------------------------------------------------------
# float64: the official run's float32 stages, emulated (test-only)

class _OfficialFloat32Softmax(torch.autograd.Function):
    """The official float64 run's attention softmax: computed in float32 (``softmax(attn_weights.float())``), cast
    back; its relevance rule ``x (R - s sum R)`` evaluated in float32 on the float32 scores and the float32 cast of
    the relevance of the weights (lxt ``softmax_fn.backward``), then cast back. Returned as the gradient whose
    ``scores * grad`` is that relevance."""

    @staticmethod
    def forward(ctx, scores, dtype):
        x32 = scores.float()
        s32 = torch.softmax(x32, -1)
        ctx.save_for_backward(scores, x32, s32)
        return s32.to(dtype)

    @staticmethod
    def backward(ctx, grad):
        scores, x32, s32 = ctx.saved_tensors
        r32 = (s32.to(grad.dtype) * grad).float()
        x32 = torch.where(torch.isneginf(x32), torch.zeros_like(x32), x32)  # masked entries (as lxt)
        r_in = (x32 * (r32 - s32 * r32.sum(-1, keepdim=True))).to(scores.dtype)
        nonzero = scores != 0
        return torch.where(nonzero, r_in / torch.where(nonzero, scores, torch.ones_like(scores)),
                           torch.zeros_like(r_in)), None


def _official_softmax_weights(scores, dtype):
    return _OfficialFloat32Softmax.apply(scores, dtype)


def _official_rms_norm(x, weight, eps, rule, *, offset=0.0, weight_before_cast=False):
    """The official ``rms_norm_identity_fn``: forward as Hugging Face's LlamaRMSNorm (float32 statistics and
    product, cast back, times the weight); the relevance of the output passes to the input unchanged."""
    assert rule == "identity" and offset == 0.0 and not weight_before_cast  # LLaMA's norm
    h = x.float()
    y = (weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)).detach()
    xd = x.detach()
    ratio = torch.where(xd != 0, y / torch.where(xd != 0, xd, torch.ones_like(xd)), torch.zeros_like(xd))
    return y + (x - xd) * ratio  # forward exactly y; gradient y / x, so x * grad = y * grad_y


def float64_component_errors(stabilizers):
    """Per sequence of the float64 fixture: (logit bit-identical to the official one, worst relative error of the
    semantic sums of both passes and of the per-layer cos / sin sums)."""
    ref = np.load(NLP / "nlp_causal_fixed_f64.npz")
    model = load("llama_causal", torch.float64)
    off = ref["offsets"]
    results = []
    for i, seq in enumerate(json.loads((NLP / "ids_causal.json").read_text())):
        sl = slice(off[i], off[i + 1])
        base = explain(model, torch.tensor([seq]), method="attnlrp", stabilizers=stabilizers, attention="eager")
        pa = explain(model, torch.tensor([seq]), method="pa_lrp", stabilizers=stabilizers, attention="eager")
        same_forward = abs(float(base.logit[0]) - ref["logit"][i]) <= 1e-12 * abs(ref["logit"][i])
        worst = max(rel_err(base.semantic[0], ref["sem_attnlrp"][sl]), rel_err(pa.semantic[0], ref["sem_pe"][sl]),
                    rel_err(pa.positional[0, :, 0], ref["pos_cos"][:, sl]),
                    rel_err(pa.positional[0, :, 1], ref["pos_sin"][:, sl]))
        results.append((same_forward, worst))
    return results


@pytest.fixture
def official_float32_stages(monkeypatch):
    monkeypatch.setattr(rules, "softmax_weights", _official_softmax_weights)
    monkeypatch.setattr(rules, "rms_norm", _official_rms_norm)


def test_float64_fixture_with_the_official_float32_stages(official_float32_stages):
    """<= 1e-9 (measured 3e-16 .. 6e-16) for every sequence whose forward rounds as the fixture machine's did (all
    three with AVX-512 kernels, one with ATEN_CPU_CAPABILITY=avx2); float32 rounding for the others."""
    for same_forward, worst in float64_component_errors("official"):
        assert worst <= (EMULATED_F64_TOL if same_forward else F64_FIXTURE_TOL), (same_forward, worst)


@pytest.mark.parametrize("field", ["linear", "add", "qk", "av"])
def test_float64_fixture_sees_every_official_stabiliser(official_float32_stages, field):
    """One stabiliser removed: the float64 check fails on the sequences it can judge (measured >= 3.1e-8 for Q K^T,
    >= 4.9e-7 for the others)."""
    results = float64_component_errors(dataclasses.replace(OFFICIAL_NLP, **{field: 0.0}))
    judged = [worst for same_forward, worst in results if same_forward]
    if not judged:
        pytest.skip("no sequence's forward rounds as on the fixture machine with this CPU's float32 kernels")
    assert min(judged) > 10 * EMULATED_F64_TOL


def test_imdb_sign_hazard_reproduced_and_corrected():
    """docs/protocol.md section 2: a negative explained logit flips the semantic map under the official code."""
    ref = np.load(NLP / "nlp_cls.npz")
    model = load("llama_cls", torch.float32)
    seq = json.loads((NLP / "ids_cls.json").read_text())[0]
    assert ref["logit"][0] < 0  # the fixture's first sample is a hazard case
    official = explain(model, torch.tensor([seq]), method="pa_lrp")
    # the sign correction alone (protocol=corrected would also switch the stabilisers off)
    fixed = explain(model, torch.tensor([seq]), method="pa_lrp", protocol="corrected", stabilizers="official")
    assert rel_err(official.scores[0].double(), ref["pa_lrp"][: ref["offsets"][1]]) <= TOL[torch.float32]
    assert torch.allclose(fixed.semantic, -official.semantic)
    assert not torch.allclose(fixed.scores, official.scores)
