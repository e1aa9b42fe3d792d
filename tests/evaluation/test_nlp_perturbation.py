"""NLP perturbation protocol (docs/protocol.md section 2): official fixtures, endpoints, ordering, padding, UNK,
batching.

The fast path (all perturbed copies in batched, de-duplicated forwards) is checked against:
* the official code's own curves on tiny models (tests/data/official/nlp, copied from the shared fixtures);
* a slow reference written here from the protocol text: one sample, one perturbed input, one forward at a time.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError, UnsupportedModelError
from palrp_bench.evaluation.procedures.nlp_perturbation import (
    TASKS,
    nlp_perturbation_curves,
    perturbation_orders,
    readout_logits,
    resolve_settings,
    resolve_unk_id,
    tokens_per_step,
)
from palrp_bench.metrics.auc import NLP_FRACTIONS
from palrp_bench.metrics.nlp import au_mse, auac

NLP = Path(__file__).resolve().parents[1] / "data" / "official" / "nlp"
PAD = 2  # pad = eos of the fixture models
UNK = 0
VARIANT_KEYS = {"generation": "generate", "pruning": "pruning"}


def _json(name):
    return json.loads((NLP / name).read_text())


@pytest.fixture(scope="module")
def cls_model():
    from transformers import LlamaForSequenceClassification
    return LlamaForSequenceClassification.from_pretrained(NLP / "llama_cls", attn_implementation="eager").eval()


@pytest.fixture(scope="module")
def lm_model():
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(NLP / "llama_causal", attn_implementation="eager").eval()


def _right_pad(sequences, width, values=None, fill=PAD):
    """``[B, width]`` ids (or float scores when ``values`` is given) and the attention mask."""
    rows = values if values is not None else sequences
    dtype = torch.float32 if values is not None else torch.long
    out = torch.tensor([list(r) + [fill] * (width - len(r)) for r in rows], dtype=dtype)
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in sequences])
    return out, mask


def _imdb_batch():
    ids = _json("ids_cls.json")
    input_ids, mask = _right_pad(ids, 24)
    scores, _ = _right_pad(ids, 24, _json("relevance_cls.json"), fill=0.0)
    return input_ids, mask, scores, _json("labels_cls.json")


def _wiki_batch():
    ids = _json("ids_causal.json")
    width = max(map(len, ids))
    input_ids, mask = _right_pad(ids, width)
    scores, _ = _right_pad(ids, width, _json("relevance_causal.json"), fill=0.0)
    return input_ids, mask, scores


def _assert_matches_official(curves, fixture):
    for ours, theirs in VARIANT_KEYS.items():
        ac = np.array(fixture["per_sample"][theirs]["AC"])
        mse = np.array(fixture["per_sample"][theirs]["MSE"])
        assert curves[ours]["ac"].shape == ac.shape == (len(ac), 11)
        np.testing.assert_allclose(curves[ours]["ac"], ac, rtol=0, atol=2e-6)
        np.testing.assert_allclose(curves[ours]["mse"], mse, rtol=1e-5, atol=2e-6)
        agg = fixture["aggregate"]
        assert auac(curves[ours]["ac"]) == pytest.approx(agg[f"{theirs}_AU_AC"], abs=2e-6)
        assert au_mse(curves[ours]["mse"]) == pytest.approx(agg[f"{theirs}_AU_MSE"], rel=1e-5)


# ------------------------------------------------------------------------------------------ official fixtures


def test_imdb_curves_match_official_fixture(cls_model):
    input_ids, mask, scores, labels = _imdb_batch()
    curves = nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, unk_id=UNK,
                                     protocol="official", show_progress=False)
    _assert_matches_official(curves, _json("curves_imdb_pad24.json"))


def test_wikipedia_curves_match_official_fixture_with_causal_mask(lm_model):
    input_ids, mask, scores = _wiki_batch()
    curves = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", mask, unk_id=UNK,
                                     protocol="official", causal=True, show_progress=False)
    _assert_matches_official(curves, _json("curves_wiki_causal.json"))


def test_mcqa_uses_the_wikipedia_rules(lm_model):
    """With the published flags flip_arc and flip_wiki compute the same curves (module docstring)."""
    input_ids, mask, scores = _wiki_batch()
    kwargs = dict(attention_mask=mask, unk_id=UNK, causal=True, show_progress=False)
    mcqa = nlp_perturbation_curves(lm_model, input_ids, scores, "mcqa", **kwargs)
    wiki = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", **kwargs)
    for variant in VARIANT_KEYS:
        for metric in ("ac", "mse"):
            np.testing.assert_array_equal(mcqa[variant][metric], wiki[variant][metric])


@pytest.mark.parametrize("causal, fixture", [(False, "nlp_causal_official_noncausal.npz"),
                                             (True, "nlp_causal_fixed.npz")])
def test_readout_reproduces_official_attention(lm_model, causal, fixture):
    """The 4D all-allowed mask reproduces the official non-causal ARC/Wikipedia forward; the 2D mask the fixed one."""
    official = np.load(NLP / fixture)
    input_ids, mask, _ = _wiki_batch()
    logits = readout_logits(lm_model, input_ids, mask, task="wikipedia", causal=causal)
    np.testing.assert_array_equal(logits.argmax(-1).numpy(), official["pred"])
    np.testing.assert_allclose(logits.max(-1).values.numpy(), official["logit"], rtol=0, atol=1e-5)


@pytest.mark.parametrize("protocol", ["official", "corrected"])
def test_causal_by_default_under_both_protocols_non_causal_only_when_asked(lm_model, protocol):
    """docs/protocol.md section 2: the official non-causal defect is reproduced only with an explicit causal=False."""
    input_ids, mask, scores = _wiki_batch()
    kwargs = dict(unk_id=UNK, protocol=protocol, show_progress=False)
    default = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", mask, **kwargs)
    causal = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", mask, causal=True, **kwargs)
    noncausal = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", mask, causal=False, **kwargs)
    np.testing.assert_array_equal(default["pruning"]["ac"], causal["pruning"]["ac"])
    assert np.abs(default["pruning"]["ac"] - noncausal["pruning"]["ac"]).max() > 1e-4
    for task in ("wikipedia", "mcqa", "imdb"):
        assert resolve_settings(TASKS[task], protocol).causal is True


# ----------------------------------------------------------------------------------------------- rules


def test_tokens_per_step_follows_the_official_float_fractions():
    # ceil(f * N) with f from linspace: 0.3, 0.6 and 0.7 are slightly above their decimals.
    assert tokens_per_step(10).tolist() == [0, 1, 2, 4, 4, 5, 7, 8, 8, 9, 10]
    assert tokens_per_step(7).tolist() == [0, 1, 2, 3, 3, 4, 5, 5, 6, 7, 7]
    assert tokens_per_step(1).tolist() == [0] + [1] * 10
    assert NLP_FRACTIONS.grid[3] > 0.3


def test_orders_hand_built():
    scores = np.array([0.5, -2.0, 0.1, 3.0, -0.3], dtype=np.float32)
    generation, pruning_abs = perturbation_orders(scores, TASKS["imdb"])
    _, pruning_signed = perturbation_orders(scores, TASKS["wikipedia"])
    assert generation.tolist() == [3, 0, 2, 4, 1]          # most relevant first, signed
    assert pruning_abs.tolist() == [2, 4, 0, 1, 3]         # smallest |r| first
    assert pruning_signed.tolist() == [1, 4, 2, 0, 3]      # smallest signed r first


def _reference_readout(model, ids, mask, task, causal):
    """One forward of one row, written from the protocol text (classifier pooled at the last real token)."""
    ids, mask = ids[None], mask[None]
    with torch.no_grad():
        if task == "imdb":
            hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
            return model.score(hidden[0, int(mask.sum()) - 1]).double()
        n = int(mask.sum())
        ids, mask = ids[:, :n], mask[:, :n]
        attention = mask if causal else torch.zeros(1, 1, n, n)
        return model(input_ids=ids, attention_mask=attention).logits[0, -1].double()


def _reference_curves(model, ids, mask, scores, task, label=None, *, count_pads, keep_bos=False):
    """Slow reference for one sample: build every step's input by hand, one forward each."""
    rule = TASKS[task]
    causal = task == "imdb"
    positions = [i for i in range(len(ids)) if (count_pads or mask[i]) and not (keep_bos and i == 0)]
    x = scores.numpy()[positions]
    gen_order = [positions[i] for i in np.argsort(x)[::-1]]
    prune_key = np.abs(x) if rule.pruning_key == "abs" else x
    prune_order = [positions[i] for i in np.argsort(prune_key)]
    memo: dict[tuple, torch.Tensor] = {}

    def readout(row):
        key = tuple(row.tolist())
        if key not in memo:
            memo[key] = _reference_readout(model, row, mask, task, causal)
        return memo[key]

    y0 = readout(ids)
    target = label if label is not None else int(y0.argmax())
    out = {v: {"ac": [], "mse": []} for v in VARIANT_KEYS}
    for f in np.linspace(0.0, 1.0, 11):
        n = int(np.ceil(f * len(positions)))
        gen = ids.clone()
        gen[positions] = UNK
        gen[gen_order[:n]] = ids[gen_order[:n]]
        prune = ids.clone()
        prune[prune_order[:n]] = UNK
        for variant, row in (("generation", gen), ("pruning", prune)):
            y = readout(row)
            out[variant]["ac"].append(float(torch.softmax(y, -1)[target]))
            diff = (y0 - y) ** 2
            out[variant]["mse"].append(float(diff.sum() if rule.mse_over == "all_logits" else diff[target]))
    return out


def _assert_close_to_reference(curves, refs):
    for b, ref in enumerate(refs):
        for variant in VARIANT_KEYS:
            for metric in ("ac", "mse"):
                np.testing.assert_allclose(curves[variant][metric][b], ref[variant][metric], rtol=1e-5, atol=1e-6)


def test_imdb_matches_slow_reference_with_hand_built_scores(cls_model):
    """Pads included (official) and excluded (corrected), |r| pruning, MSE over both logits, gold label tracked."""
    input_ids, mask, _, labels = _imdb_batch()
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(input_ids.shape, generator=gen)
    for protocol, count_pads, samples in (("official", True, [1, 2]), ("corrected", False, [0])):
        curves = nlp_perturbation_curves(cls_model, input_ids[samples], scores[samples], "imdb", mask[samples],
                                         [labels[b] for b in samples], unk_id=UNK, protocol=protocol,
                                         keep_bos=False, show_progress=False)
        refs = [_reference_curves(cls_model, input_ids[b], mask[b], scores[b], "imdb", labels[b],
                                  count_pads=count_pads) for b in samples]
        _assert_close_to_reference(curves, refs)


def test_wikipedia_matches_slow_reference_non_causal(lm_model):
    input_ids, mask, _ = _wiki_batch()
    scores = torch.randn(input_ids.shape, generator=torch.Generator().manual_seed(1))
    curves = nlp_perturbation_curves(lm_model, input_ids, scores, "wikipedia", mask, unk_id=UNK,
                                     protocol="official", causal=False, show_progress=False)
    refs = [_reference_curves(lm_model, input_ids[b], mask[b], scores[b], "wikipedia", count_pads=False)
            for b in range(input_ids.shape[0])]
    _assert_close_to_reference(curves, refs)


def test_endpoints_are_original_and_fully_perturbed(cls_model, lm_model):
    input_ids, mask, scores, labels = _imdb_batch()
    curves = nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, unk_id=UNK,
                                     show_progress=False)
    original = torch.softmax(readout_logits(cls_model, input_ids, mask, task="imdb").double(), -1)
    all_unk = torch.softmax(readout_logits(cls_model, torch.full_like(input_ids, UNK), mask,
                                           task="imdb").double(), -1)
    gold = torch.tensor(labels)
    rows = torch.arange(len(labels))
    np.testing.assert_allclose(curves["pruning"]["ac"][:, 0], original[rows, gold], atol=1e-6)
    np.testing.assert_allclose(curves["generation"]["ac"][:, 10], original[rows, gold], atol=1e-6)
    np.testing.assert_allclose(curves["pruning"]["ac"][:, 10], all_unk[rows, gold], atol=1e-6)
    np.testing.assert_allclose(curves["generation"]["ac"][:, 0], all_unk[rows, gold], atol=1e-6)
    np.testing.assert_allclose(curves["pruning"]["mse"][:, 0], 0.0, atol=1e-10)
    np.testing.assert_allclose(curves["generation"]["mse"][:, 10], 0.0, atol=1e-10)

    ids, lm_mask, lm_scores = _wiki_batch()
    lm = nlp_perturbation_curves(lm_model, ids, lm_scores, "wikipedia", lm_mask, unk_id=UNK, causal=True,
                                 show_progress=False)
    logits = readout_logits(lm_model, ids, lm_mask, task="wikipedia", causal=True).double()
    predicted = logits.argmax(-1)
    unk_ids = torch.where(lm_mask.bool(), torch.full_like(ids, UNK), ids)
    unk_logits = readout_logits(lm_model, unk_ids, lm_mask, task="wikipedia", causal=True).double()
    rows = torch.arange(ids.shape[0])
    np.testing.assert_allclose(lm["pruning"]["ac"][:, 0], torch.softmax(logits, -1)[rows, predicted], atol=1e-6)
    np.testing.assert_allclose(lm["pruning"]["ac"][:, 10], torch.softmax(unk_logits, -1)[rows, predicted],
                               atol=1e-6)
    np.testing.assert_allclose(lm["pruning"]["mse"][:, 10],
                               (logits[rows, predicted] - unk_logits[rows, predicted]) ** 2, rtol=1e-5)


def test_predicted_overrides_the_tracked_token(lm_model):
    ids, mask, scores = _wiki_batch()
    tracked = torch.tensor([5, 6, 7])
    curves = nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", mask, unk_id=UNK, causal=True,
                                     predicted=tracked, show_progress=False)
    logits = readout_logits(lm_model, ids, mask, task="wikipedia", causal=True).double()
    expected = torch.softmax(logits, -1)[torch.arange(3), tracked]
    np.testing.assert_allclose(curves["pruning"]["ac"][:, 0], expected, atol=1e-6)


def test_a_causal_lm_is_read_on_its_device_at_the_tracked_token(lm_model, monkeypatch):
    """With ``tracked`` the read-out returns per row (class, logit, log-sum-exp) in float64 instead of the
    vocabulary-wide logits, which the MCQA / Wikipedia curves then never bring to the host; equal to the values
    taken from the full logits on the host."""
    from palrp_bench.evaluation.procedures import nlp_perturbation

    ids, mask, _ = _wiki_batch()
    full = readout_logits(lm_model, ids, mask, task="wikipedia").double()
    stats = readout_logits(lm_model, ids, mask, task="wikipedia", tracked=torch.tensor([-1, 6, -1]), batch_size=2)
    index = torch.tensor([int(full[0].argmax()), 6, int(full[2].argmax())])
    assert stats.dtype == torch.float64 and stats.shape == (3, 3) and torch.equal(stats[:, 0].long(), index)
    torch.testing.assert_close(stats[:, 1], full[torch.arange(3), index], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stats[:, 2], torch.logsumexp(full, -1), rtol=1e-6, atol=1e-6)
    vocabulary = full.shape[1]
    with pytest.raises(BadInputError, match=f"tracked class {vocabulary} is outside the {vocabulary} logits"):
        readout_logits(lm_model, ids, mask, task="wikipedia", tracked=torch.tensor([0, vocabulary, 0]))
    widths = []
    real = nlp_perturbation.readout_logits
    monkeypatch.setattr(nlp_perturbation, "readout_logits",
                        lambda *a, **k: (lambda out: widths.append(out.shape[1]) or out)(real(*a, **k)))
    nlp_perturbation_curves(lm_model, ids, torch.randn(ids.shape), "mcqa", mask, unk_id=UNK, show_progress=False)
    assert widths == [3, 3]  # the original rows (their arg-max), then the perturbed rows; never [R, V]
    for bad in ([-1, 0, 0], [0, 0, vocabulary]):
        with pytest.raises(BadInputError, match="outside the"):
            nlp_perturbation_curves(lm_model, ids, torch.randn(ids.shape), "mcqa", mask, unk_id=UNK, predicted=bad,
                                    show_progress=False)


# ----------------------------------------------------------------------------------------- padding, BOS, UNK


def test_corrected_protocol_keeps_bos_and_pads(cls_model):
    """keep_bos: BOS never replaced; exclude_padding: N counts real tokens only (3 of them here)."""
    ids = torch.tensor([[1, 40, 41, 42, PAD, PAD]])
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    scores = torch.tensor([[9.0, 0.3, -0.2, 0.1, 0.0, 0.0]])
    curves = nlp_perturbation_curves(cls_model, ids, scores, "imdb", mask, [1], unk_id=UNK,
                                     protocol="corrected", show_progress=False)
    # counts for N = 3: [0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]; generation order 40 (0.3), 42 (0.1), 41 (-0.2)
    gen_steps = {0: [1, 0, 0, 0], 1: [1, 40, 0, 0], 4: [1, 40, 0, 42], 7: [1, 40, 41, 42]}
    # pruning order by |r|: 42 (0.1), 41 (0.2), 40 (0.3)
    prune_steps = {0: [1, 40, 41, 42], 1: [1, 40, 41, 0], 4: [1, 40, 0, 0], 7: [1, 0, 0, 0]}
    for variant, steps in (("generation", gen_steps), ("pruning", prune_steps)):
        for step, real_ids in steps.items():
            row = torch.tensor([real_ids + [PAD, PAD]])
            expected = torch.softmax(readout_logits(cls_model, row, mask, task="imdb").double(), -1)[0, 1]
            assert curves[variant]["ac"][0, step] == pytest.approx(float(expected), abs=1e-6), (variant, step)
    assert tokens_per_step(3).tolist() == [0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3]


def test_keep_bos_rejects_a_sequence_without_bos(cls_model):
    with pytest.raises(BadInputError, match="BOS"):
        nlp_perturbation_curves(cls_model, torch.tensor([[7, 8, 9]]), torch.ones(1, 3), "imdb", labels=[0],
                                unk_id=UNK, keep_bos=True, show_progress=False)


def test_official_restores_id0_tokens_in_generation(lm_model):
    """The official 'set pad tokens' line keeps original id-0 tokens in generation (visible when UNK != 0)."""
    ids = torch.tensor([[1, 50, 0, 60, 70]])
    scores = torch.tensor([[0.0, 1.0, -5.0, 0.5, 0.2]])
    unk = 3
    on = nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", unk_id=unk, causal=True,
                                 restore_id0_tokens=True, show_progress=False)
    off = nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", unk_id=unk, causal=True,
                                  restore_id0_tokens=False, show_progress=False)
    logits0 = readout_logits(lm_model, ids, task="wikipedia", causal=True).double()[0]
    target = int(logits0.argmax())
    with_zero = readout_logits(lm_model, torch.tensor([[unk, unk, 0, unk, unk]]), task="wikipedia").double()[0]
    all_unk = readout_logits(lm_model, torch.full_like(ids, unk), task="wikipedia").double()[0]
    assert on["generation"]["ac"][0, 0] == pytest.approx(float(torch.softmax(with_zero, -1)[target]), abs=1e-6)
    assert off["generation"]["ac"][0, 0] == pytest.approx(float(torch.softmax(all_unk, -1)[target]), abs=1e-6)
    assert resolve_settings(TASKS["wikipedia"], "official").restore_id0_tokens is True
    assert resolve_settings(TASKS["wikipedia"], "corrected").restore_id0_tokens is False


def _word_level_tokenizer(with_unk: bool):
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    vocab = {"<s>": 0, "hello": 1, "#": 2, "world": 3, "<unk>": 4}
    core = Tokenizer(WordLevel(vocab, unk_token="<unk>" if with_unk else None))
    core.pre_tokenizer = Whitespace()
    kwargs = {"unk_token": "<unk>"} if with_unk else {}
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<s>", **kwargs)


def test_unk_choice():
    assert resolve_unk_id(tokenizer=_word_level_tokenizer(with_unk=True)) == 4
    # LLaMA-3 style: no unk token -> the id of "#" (as the official ARC / Wikipedia scripts do)
    assert resolve_unk_id(tokenizer=_word_level_tokenizer(with_unk=False)) == 2
    assert resolve_unk_id(7, tokenizer=_word_level_tokenizer(with_unk=True)) == 7
    with pytest.raises(BadInputError, match="unk_id"):
        resolve_unk_id()


def test_tokenizer_argument_sets_unk(lm_model):
    ids, mask, scores = _wiki_batch()
    via_tokenizer = nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", mask, causal=True,
                                            tokenizer=_word_level_tokenizer(with_unk=False), show_progress=False)
    via_id = nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", mask, unk_id=2, causal=True,
                                     show_progress=False)
    np.testing.assert_array_equal(via_tokenizer["generation"]["ac"], via_id["generation"]["ac"])
    with pytest.raises(BadInputError, match="UNK"):
        nlp_perturbation_curves(lm_model, ids, scores, "wikipedia", mask, show_progress=False)


# ------------------------------------------------------------------------------------------------ batching


def test_batch_invariance(cls_model, lm_model):
    """Same per-sample curves for batch sizes 1 and 3 and for one call per sample."""
    input_ids, mask, scores, labels = _imdb_batch()
    ids, lm_mask, lm_scores = _wiki_batch()
    cases = [(cls_model, input_ids, mask, scores, "imdb", labels), (lm_model, ids, lm_mask, lm_scores, "wikipedia",
                                                                     None)]
    for model, x, m, s, task, y in cases:
        runs = [nlp_perturbation_curves(model, x, s, task, m, y, unk_id=UNK, batch_size=size, show_progress=False)
                for size in (1, 3)]
        singles = [nlp_perturbation_curves(model, x[b:b + 1], s[b:b + 1], task, m[b:b + 1],
                                           None if y is None else y[b:b + 1], unk_id=UNK, batch_size=3,
                                           show_progress=False) for b in range(x.shape[0])]
        for variant in VARIANT_KEYS:
            for metric in ("ac", "mse"):
                stacked = np.concatenate([single[variant][metric] for single in singles])
                np.testing.assert_allclose(runs[0][variant][metric], runs[1][variant][metric], rtol=1e-5, atol=1e-6)
                np.testing.assert_allclose(runs[0][variant][metric], stacked, rtol=1e-5, atol=1e-6)
                assert runs[0][variant][metric].dtype == np.float64


# ---------------------------------------------------------------------------------------------- user errors


def test_user_errors(cls_model, lm_model):
    input_ids, mask, scores, labels = _imdb_batch()
    call = dict(show_progress=False, unk_id=UNK)
    with pytest.raises(BadInputError, match="labels"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, **call)
    with pytest.raises(BadInputError, match="unknown perturbation task"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "sst2", mask, labels, **call)
    with pytest.raises(BadInputError, match="protocol"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, protocol="paper",
                                show_progress=False, unk_id=UNK)
    with pytest.raises(BadInputError, match="causal=False"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, causal=False, **call)
    with pytest.raises(BadInputError, match="shape"):
        nlp_perturbation_curves(cls_model, input_ids, scores[:, :5], "imdb", mask, labels, **call)
    with pytest.raises(BadInputError, match="right-padded"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask.flip(1), labels, **call)
    with pytest.raises(BadInputError, match="NaN"):
        nlp_perturbation_curves(cls_model, input_ids, scores * float("nan"), "imdb", mask, labels, **call)
    with pytest.raises(BadInputError, match="predicted"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, predicted=[0, 0, 0], **call)
    with pytest.raises(UnsupportedModelError, match="causal LM"):
        nlp_perturbation_curves(cls_model, input_ids, scores, "wikipedia", mask, **call)
    with pytest.raises(UnsupportedModelError, match="sequence classifier"):
        nlp_perturbation_curves(lm_model, input_ids, scores, "imdb", mask, labels, **call)
    with pytest.raises(BadInputError, match="no token"):
        nlp_perturbation_curves(lm_model, torch.tensor([[1]]), torch.ones(1, 1), "wikipedia", keep_bos=True, **call)
    cls_model.train()
    try:
        with pytest.raises(BadInputError, match="eval"):
            nlp_perturbation_curves(cls_model, input_ids, scores, "imdb", mask, labels, **call)
    finally:
        cls_model.eval()
