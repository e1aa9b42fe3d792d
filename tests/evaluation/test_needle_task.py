"""The needle in a haystack through the evidence kind (docs/evidence.md "Needle in a haystack") on the embedded
``tiny_llama_needle``: retrieval decides correctness, the rows carry the key mask and the positional share's sums
(checked against single-sample explanations, padding included), the info carries length and depth, and the cache
gives the same rows."""
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

import palrp_bench
from palrp_bench import catalog
from palrp_bench.data import needle as nd
from palrp_bench.data.synthetic_text import load_tiny_text_model, load_tiny_tokenizer
from palrp_bench.evaluation.tasks.base import JobContext
from palrp_bench.evaluation.tasks.evidence import EvidenceAdapter, prepare_evidence


@pytest.fixture(scope="module")
def needle():
    model, tok = load_tiny_text_model("needle"), load_tiny_tokenizer(kind="needle")
    bundle = SimpleNamespace(model=model, tokenizer=tok, device="cpu",
                             config=SimpleNamespace(kind=SimpleNamespace(value="causal")))
    samples = nd.make_needle_samples(tok, nd.filler_documents(0), lengths=[96, 160], depths=[0.0, 0.5, 1.0], n=1)
    prepared, dropped = prepare_evidence(samples, tok, "causal", 4096)
    assert dropped == {} and len(prepared) == 6
    return bundle, prepared


def _ctx(method, metrics=("evidence", "positional_share"), cache=None):
    task = OmegaConf.to_object(catalog.load("task", "synthetic_needle"))
    return JobContext(task=task, method=method, rules=None, aggregation="official", protocol="official",
                      metrics=metrics, cache=cache)


@torch.no_grad()
def test_a_needle_is_answered_when_its_value_is_the_arg_max(needle):
    bundle, prepared = needle
    adapter = EvidenceAdapter()
    tops = [int(bundle.model(input_ids=torch.tensor([p.input_ids])).logits[0, -1].argmax()) for p in prepared]
    assert tops == [p.target_id for p in prepared]  # the tiny model retrieves every one of these
    assert adapter.correct(bundle, prepared, None) == [True] * len(prepared)
    # the runner-up beats the foil but is not what the model says: no retrieval, though the contrast holds
    p = prepared[0]
    logits = bundle.model(input_ids=torch.tensor([p.input_ids])).logits[0, -1]
    digits = [nd.NEEDLE_VOCAB[str(d)] for d in range(10)]
    runner_up = max((d for d in digits if d != p.target_id), key=lambda d: float(logits[d]))
    lowest = min(digits, key=lambda d: float(logits[d]))
    wrong = replace(p, target_id=runner_up, foil_id=lowest)
    assert adapter.correct(bundle, [wrong], None) == [False]
    assert adapter.correct(bundle, [replace(wrong, retrieval=False)], None) == [True]


def test_rows_hold_the_key_mask_the_sums_and_the_grid_cell(needle, tmp_path):
    from palrp_bench.runner.store import ExplanationCache

    bundle, prepared = needle
    adapter = EvidenceAdapter()
    ctx = _ctx("pa_lrp", cache=ExplanationCache(tmp_path))
    results = adapter.evaluate(bundle, prepared, ctx)  # one batch of two lengths: padding in the shorter ones
    for p, r in zip(prepared, results):
        rows = {(m, v): value for m, v, _, value in r.rows}
        assert {("pg", "key"), ("rma", "key"), ("pg", "default"), ("rma", "with_question")} <= set(rows)
        assert (r.info["length"], r.info["depth"]) == (p.meta["length"], p.meta["depth"])
        alone = palrp_bench.explain(bundle.model, torch.tensor([p.input_ids]), target=torch.tensor([p.target_id]),
                                    method="pa_lrp")
        semantic, positional = float(alone.semantic.sum()), float(alone.positional.sum())
        scale = abs(semantic) + abs(positional)
        assert rows[("relevance_semantic", "all")] == pytest.approx(semantic, abs=1e-5 * scale)
        assert rows[("relevance_positional", "all")] == pytest.approx(positional, abs=1e-5 * scale)
        assert positional != 0.0
        absorbed = float(alone.extras["absorbed"][0])  # the parts and the absorbed relevance are the logit
        assert semantic + positional + absorbed == pytest.approx(float(alone.logit[0]), abs=1e-4 * scale)
        ctx.cache.save(p.sample_id, r.explanation)
    again = adapter.evaluate(bundle, prepared, ctx)  # every sample from the cache, the sums included
    assert [r.rows for r in again] == [r.rows for r in results]
    assert [(r.info["length"], r.info["depth"]) for r in again] == [(r.info["length"], r.info["depth"])
                                                                     for r in results]


def test_a_cache_without_the_sums_is_explained_again(needle, tmp_path):
    from palrp_bench.runner.store import ExplanationCache

    bundle, prepared = needle
    adapter = EvidenceAdapter()
    ctx = _ctx("attnlrp", metrics=("evidence",), cache=ExplanationCache(tmp_path))
    for p, r in zip(prepared, adapter.evaluate(bundle, prepared, ctx)):
        assert "relevance_semantic" not in r.explanation  # not asked for: not computed
        ctx.cache.save(p.sample_id, r.explanation)
    results = adapter.evaluate(bundle, prepared, replace(ctx, metrics=("evidence", "positional_share")))
    for r in results:
        rows = {(m, v): value for m, v, _, value in r.rows}
        assert rows[("relevance_positional", "all")] == 0.0 and rows[("relevance_semantic", "all")] > 0
        assert r.explanation is not None and "relevance_semantic" in r.explanation  # recomputed and cached anew


@torch.no_grad()
def test_the_shipped_model_retrieves_at_the_shipped_lengths(needle):
    from palrp_bench.data.evidence_common import render
    from palrp_bench.data.synthetic_text import load_training_report

    bundle, _ = needle
    report = load_training_report("needle")["heldout"]["per_length"]
    assert all(report[str(length)]["accuracy"] == 1.0 for length in (256, 512, 1024))  # docs/evidence.md
    assert report["2048"]["accuracy"] > 0.9  # twice the longest trained length; chance is 1/9
    fresh = nd.make_needle_samples(bundle.tokenizer, nd.filler_documents(7), lengths=[512], depths=[0.0, 0.3, 0.7, 1.0],
                                   n=4, seed=7)  # needles and filler no report used
    hits = [int(bundle.model(input_ids=bundle.tokenizer(render(s, "causal").text, return_tensors="pt")["input_ids"])
                .logits[0, -1].argmax()) == nd.NEEDLE_VOCAB[s.target[0]] for s in fresh]
    assert sum(hits) >= 15  # of 16
