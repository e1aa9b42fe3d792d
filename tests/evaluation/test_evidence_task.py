"""The ``evidence`` task kind (docs/evidence.md): inputs per head, the evaluation masks after word-level, byte-level
BPE and WordPiece tokenizers built in the tests, the drops, the read-out and the contrast on a tiny BERT masked LM."""
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from data.test_text_evidence import _byte_bpe, _word_level, _wordpiece
from models.families import make_text
from palrp_bench import catalog
from palrp_bench.data.evidence_common import EvidenceSample
from palrp_bench.evaluation.tasks.base import JobContext
from palrp_bench.evaluation.tasks.evidence import (ADAPTER_DROPS, EvidenceAdapter, evaluation_masks,
                                                   prepare_evidence, word_token)

SVA = EvidenceSample(sample_id="s", task="sva", target="are", foil="table", evidence=((4, 8),),
                     prefix="The keys to the cabinet", suffix=" on the table.")


def _head(tok):
    return "masked" if tok.mask_token else "causal"


@pytest.mark.parametrize("build", [_word_level, _byte_bpe, _wordpiece])
def test_masks_keep_what_the_text_holds_and_drop_what_the_tokenizer_adds(build):
    tok = build()
    (p,), dropped = prepare_evidence([SVA], tok, _head(tok), None)
    assert dropped == {}
    tokens = tok.convert_ids_to_tokens(p.input_ids)
    added = [t in {tok.bos_token_id, tok.cls_token_id, tok.sep_token_id} - {None} for t in p.input_ids]
    assert p.special == added  # BOS (word-level), [CLS] / [SEP] (WordPiece), none (byte BPE: no BOS prepended)
    assert [t.replace("Ġ", "").lower() for t, e in zip(tokens, p.evidence) if e] == ["keys"]
    masks = evaluation_masks(p)
    assert set(masks) == {"default", "with_special"}
    valid, evidence = masks["default"]
    assert valid == [not a for a in added] and evidence == p.evidence
    assert masks["with_special"][0] == [True] * len(p)
    if tok.mask_token:  # the masked LM reads the mask token, which stays evaluated
        assert tokens[p.position] == tok.mask_token and valid[p.position]
    else:
        assert p.position == len(p) - 1 and tokens[-1] == tok.convert_ids_to_tokens(  # the prefix's last word
            tok(" cabinet", add_special_tokens=False)["input_ids"])[-1]
    assert (p.target_id, p.foil_id) == (word_token(tok, "are", single=True), word_token(tok, "table", single=True))


def test_qa_default_is_the_context_and_with_question_adds_question_and_prompt():
    tok = _wordpiece()
    s = EvidenceSample(sample_id="q", task="qa", target="rome", foil="tom", evidence=((14, 18),),
                       context="tom lives in rome", question="the table")
    (p,), _ = prepare_evidence([s], tok, "masked", None)
    tokens = tok.convert_ids_to_tokens(p.input_ids)
    masks = evaluation_masks(p)
    assert set(masks) == {"default", "with_special", "with_question"}
    default = [t for t, v in zip(tokens, masks["default"][0]) if v]
    assert default == ["tom", "lives", "in", "rome"]
    assert [t for t, e in zip(tokens, masks["default"][1]) if e] == ["rome"]
    question = [t for t, v in zip(tokens, masks["with_question"][0]) if v]
    assert set(default) < set(question) and {"table", tok.mask_token} <= set(question)
    assert "[CLS]" not in question and "[SEP]" not in question
    assert sorted(t for t, v in zip(tokens, masks["with_special"][0]) if v) == sorted(default + ["[CLS]", "[SEP]"])


def test_drops_are_counted_by_reason():
    bpe, wp = _byte_bpe(), _wordpiece()
    covers = replace(SVA, sample_id="c", prefix="keys", suffix="", evidence=((0, 4),))
    shared = replace(SVA, sample_id="f", target="cabinet", foil="cabinets")
    kept, dropped = prepare_evidence([SVA, covers, shared], bpe, "causal", None)
    assert [p.sample_id for p in kept] == ["s"]
    assert dropped == {"evidence_covers_all": 1, "same_first_token": 1}
    _, dropped = prepare_evidence([SVA], bpe, "causal", 3)
    assert dropped == {"too_long": 1}
    multi = replace(SVA, sample_id="m", foil="cabinets")  # one word, two WordPiece tokens
    unknown = replace(SVA, sample_id="u", foil="xylophone")
    kept, dropped = prepare_evidence([SVA, multi, unknown], wp, "masked", None)
    assert [p.sample_id for p in kept] == ["s"] and dropped == {"multi_token_word": 1, "unknown_word": 1}
    assert set(dropped) <= set(ADAPTER_DROPS)


@pytest.fixture(scope="module")
def bert():
    tok = _wordpiece()
    model = make_text("bert", "masked_lm", torch.float64)
    bundle = SimpleNamespace(model=model, tokenizer=tok, device="cpu",
                             config=SimpleNamespace(kind=SimpleNamespace(value="masked_lm")))
    samples = [SVA, replace(SVA, sample_id="t", prefix="The key near the table", evidence=((4, 7),), target="on",
                            foil="are", suffix=" the cabinet.")]
    prepared, dropped = prepare_evidence(samples, tok, "masked", None)
    assert len(prepared) == 2 and not dropped
    return bundle, prepared


def _ctx(method, contrastive=True):
    task = OmegaConf.to_object(catalog.load("task", "synthetic_sva"))
    return JobContext(task=replace(task, contrastive=contrastive), method=method, rules=None, aggregation="official",
                      protocol="official", metrics=("evidence",), stabilizers="none")


@pytest.mark.parametrize("method", ["attnlrp", "gradient_l2", "alti"])
def test_a_masked_lm_is_read_at_the_mask_and_every_row_is_written(bert, method):
    bundle, prepared = bert
    adapter = EvidenceAdapter()
    with torch.no_grad():
        logits = bundle.model(input_ids=torch.tensor([prepared[0].input_ids])).logits[0, prepared[0].position]
    results = adapter.evaluate(bundle, prepared, _ctx(method))
    p = prepared[0]
    assert results[0].info["logit"] == pytest.approx(float(logits[p.target_id] - logits[p.foil_id]), rel=1e-9)
    assert adapter.correct(bundle, prepared[:1], None) == [bool(logits[p.target_id] > logits[p.foil_id])]
    keys = {(m, v) for m, v, _, _ in results[0].rows}
    for variant in ("default", "with_special"):
        assert {(m, variant) for m in ("pg", "mrr", "rma", "pta", "tied_token_share")} <= keys
        assert {("pg", variant + "_corrected_ties"), ("mrr", variant + "_corrected_ties")} <= keys
    assert all(0.0 <= value <= 1.0 for r in results for _, _, _, value in r.rows)
    assert results[0].info["contrastive"] and results[0].info["foil"] == p.foil_id


def test_the_contrast_is_the_difference_of_two_single_target_explanations(bert):
    bundle, prepared = bert
    adapter = EvidenceAdapter()
    width = max(len(p) for p in prepared)
    contrast, _, _, _ = adapter._explained(bundle, prepared, _ctx("attnlrp"), width)
    top, info, _, _ = adapter._explained(bundle, prepared, _ctx("attnlrp", contrastive=False), width)
    foils = [replace(p, target_id=p.foil_id) for p in prepared]
    foil, _, _, _ = adapter._explained(bundle, foils, _ctx("attnlrp", contrastive=False), width)
    assert not info[0]["contrastive"] and "foil" not in info[0]
    scale = float(contrast.abs().max())
    assert scale > 0 and not torch.allclose(contrast, top)
    torch.testing.assert_close(contrast, top - foil, atol=1e-5 * scale, rtol=0)  # float32 scores of a float64 model


def test_scores_keep_the_explanations_precision_through_the_metrics_and_the_cache(bert, tmp_path):
    from palrp_bench.runner.store import ExplanationCache

    bundle, prepared = bert
    adapter = EvidenceAdapter()
    ctx = replace(_ctx("alti"), cache=ExplanationCache(tmp_path))     # float64 model: float64 explanations
    fresh = adapter.evaluate(bundle, prepared, ctx)
    for sample, result in zip(prepared, fresh):
        assert result.explanation["scores"].dtype == np.float64 and len(result.explanation["scores"]) == len(sample)
        ctx.cache.save(sample.sample_id, result.explanation)
    again = adapter.evaluate(bundle, prepared, ctx)                     # every sample from the cache
    assert [r.rows for r in again] == [r.rows for r in fresh]
    # the scores of the issue: a float32 cast would tie .5 and .5 + 1e-12 (official MRR 1/2) and flush 1e-50 to 0
    # (PTA 1/2); in float64 the best evidence token is untied and every token is positive
    p = replace(prepared[0], sample_id="x", input_ids=prepared[0].input_ids[:4], special=[False] * 4,
                evidence=[True, False, False, False], position=3)
    arrays = dict(fresh[0].explanation, scores=np.array([1.0, 0.5, 0.5 + 1e-12, 1e-50]))
    ctx.cache.save("x", arrays)
    (result,) = adapter.evaluate(bundle, [p], ctx)
    values = {(m, v): value for m, v, _, value in result.rows}
    assert values[("mrr", "default")] == 1.0 and values[("pg", "default")] == 1.0
    assert values[("pta", "default")] == 0.25 and values[("tied_token_share", "default")] == 0.0
    ctx.cache.save("x", dict(arrays, scores=arrays["scores"].astype(np.float32)))    # what a float32 store kept
    (result,) = adapter.evaluate(bundle, [p], ctx)
    values = {(m, v): value for m, v, _, value in result.rows}
    assert values[("mrr", "default")] == 0.5 and values[("pta", "default")] == 0.5
