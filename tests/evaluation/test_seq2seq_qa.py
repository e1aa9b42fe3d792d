"""The ``seq2seq_qa`` task kind (evaluation/tasks/seq2seq_qa.py; docs/baselines.md "The Flan-T5 SQuAD v2 column") on the
shipped tiny T5: the B.1 prompt and its context / answer token masks, the context-only zero-embedding insertion,
the first answer token explained, rows as the metrics define them (iou only on correct answers), batch
independence, SQuAD's exact match."""
import numpy as np
import pytest
import torch

import palrp_bench
from palrp_bench.data import synthetic_evidence as se
from palrp_bench.data import synthetic_text as st
from palrp_bench.data.squad import normalize_answer, squad_exact_match
from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures.attnlrp_perturbation import seq2seq_token_logit_curves
from palrp_bench.evaluation.tasks import ModelBundle, task_adapter
from palrp_bench.evaluation.tasks.seq2seq_qa import encode_qa
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg


@pytest.fixture(scope="module")
def t5():
    return st.load_tiny_text_model("t5_squad"), st.load_tiny_tokenizer(kind="t5_squad")


def _cell(tmp_path, *overrides):
    return plan_cells(compose_cfg(tmp_path, *overrides))[0]


def test_prompt_and_masks(t5):
    _, tok = t5
    sample = se.make_synthetic_qa(3, seed=2)[1]
    ids, context, answer = encode_qa(tok, sample)
    words = tok.convert_ids_to_tokens(ids)
    assert ids == tok(f"Context: {sample.context}\nQuestion: {sample.question}\nAnswer:")["input_ids"]  # B.1
    assert words[:3] == ["<s>", "Context", ":"] and words[-2:] == ["Answer", ":"]
    assert [w for w, c in zip(words, context) if c] == tok.convert_ids_to_tokens(tok(sample.context)["input_ids"][1:])
    assert [w for w, a in zip(words, answer) if a] == [sample.target]
    assert not any(a and not c for a, c in zip(answer, context))  # the answer lies inside the context
    with pytest.raises(BadInputError, match="not extractive qa"):
        encode_qa(tok, se.make_synthetic_sva(1)[0])


def test_insertion_perturbs_only_the_context(t5):
    """Insertion from the zero baseline over the context tokens: step 0 = every context embedding zero and the
    rest of the prompt intact, the last step = the input; one step per context token."""
    model, tok = t5
    sample = se.make_synthetic_qa(1, seed=3)[0]
    ids, context, _ = encode_qa(tok, sample)
    ids, context = torch.tensor([ids]), torch.tensor([context])
    start = torch.tensor([[model.config.decoder_start_token_id]])
    scores = torch.randn(ids.shape, generator=torch.Generator().manual_seed(0))
    target = int(model(input_ids=ids, decoder_input_ids=start).logits[0, -1].argmax())
    (curves,) = seq2seq_token_logit_curves(model, ids, None, context, scores, [target], start)
    n = int(context.sum())
    assert curves.morf.shape == (n + 1,) and np.allclose(curves.fractions, np.arange(n + 1) / n)
    with torch.no_grad():
        embeds = model.get_input_embeddings()(ids)
        baseline = model(inputs_embeds=embeds * (~context)[..., None], decoder_input_ids=start).logits[0, -1, target]
        full = model(input_ids=ids, decoder_input_ids=start).logits[0, -1, target]
    # float32 forwards of the same inputs, one in a batch of rows: a few ulps of logits of size ~10
    assert curves.morf[0] == pytest.approx(float(baseline), abs=1e-4)
    assert curves.morf[-1] == pytest.approx(float(full), abs=1e-4)
    assert curves.lerf[0] == curves.morf[0] and curves.lerf[-1] == curves.morf[-1]
    # the most relevant context token alone, inserted first
    first = int(torch.nonzero(context[0]).flatten()[scores[0][context[0]].argmax()])
    keep = (~context).clone()
    keep[0, first] = True
    with torch.no_grad():
        one = model(inputs_embeds=embeds * keep[..., None], decoder_input_ids=start).logits[0, -1, target]
    assert curves.morf[1] == pytest.approx(float(one), abs=1e-4)
    with pytest.raises(BadInputError, match="no token to perturb"):
        seq2seq_token_logit_curves(model, ids, None, torch.zeros_like(context), scores, [target], start)


def test_adapter_rows_correctness_and_batch_independence(tmp_path, t5):
    model, tok = t5
    cell = _cell(tmp_path, "model=tiny_t5", "task=synthetic_squad", "method=attnlrp")
    bundle = ModelBundle(cell.model, model, tok, "cpu")
    adapter = task_adapter(cell.task.kind)
    samples = adapter.load_samples(cell.task, bundle)[:4]
    # a wrong gold answer makes one sample incorrect: no iou row for it
    samples[2].meta = dict(samples[2].meta, answer="nothing")
    ctx = cell.context("cpu", None, forward_batch_size=5)
    together = adapter.evaluate(bundle, samples, ctx, metrics=("attnlrp_perturbation", "iou"))
    alone = [adapter.evaluate(bundle, [s], ctx, metrics=("attnlrp_perturbation", "iou"))[0] for s in samples]
    for a, b in zip(together, alone):
        assert [r[:3] for r in a.rows] == [r[:3] for r in b.rows]
        np.testing.assert_allclose([r[3] for r in a.rows], [r[3] for r in b.rows], rtol=1e-5, atol=1e-5)
    correct = {r.sample_id: dict(((m, v), x) for m, v, _, x in r.rows) for r in together}
    for s, result in zip(samples, together):
        values = correct[s.sample_id]
        assert values[("correct", "all")] == float(s.sample_id != samples[2].sample_id)
        assert (("iou", "positive") in values) == (("iou", "top_answer") in values) == bool(values[("correct", "all")])
        assert {("a_morf", "insertion"), ("a_lerf", "insertion")} <= set(values)
        assert result.info["answer"] == (s.target if values[("correct", "all")] else result.info["answer"])
    # the explained token is the first answer token greedy decoding generates
    ids = torch.tensor([encode_qa(tok, samples[0])[0]])
    out = model.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    assert together[0].info["explained"] == int(out[0, 1])
    assert adapter.correct(bundle, samples, ctx) == [True, True, False, True]


def test_iou_rows_are_the_two_readings_over_the_context(tmp_path, t5):
    model, tok = t5
    cell = _cell(tmp_path, "model=tiny_t5", "task=synthetic_squad", "method=grad_x_input")
    bundle = ModelBundle(cell.model, model, tok, "cpu")
    adapter = task_adapter(cell.task.kind)
    sample = adapter.load_samples(cell.task, bundle)[0]
    (result,) = adapter.evaluate(bundle, [sample], cell.context("cpu", None, 8), metrics=("iou",))
    ids, context, answer = encode_qa(tok, sample)
    start = torch.tensor([[model.config.decoder_start_token_id]])
    rel = palrp_bench.explain(model, torch.tensor([ids]), decoder_input_ids=start, method="grad_x_input")
    positive = {i for i, (s, c) in enumerate(zip(rel.scores[0].tolist(), context)) if c and s > 0}
    gold = {i for i, a in enumerate(answer) if a}
    expected = len(positive & gold) / len(positive | gold)
    ranked = sorted((i for i, c in enumerate(context) if c), key=lambda i: -float(rel.scores[0, i]))
    top = set(ranked[:len(gold)])
    iou = {v: value for m, v, _, value in result.rows if m == "iou"}
    assert set(iou) == {"positive", "top_answer"}
    assert iou["positive"] == pytest.approx(expected, abs=1e-12)
    assert iou["top_answer"] == pytest.approx(len(top & gold) / len(top | gold), abs=1e-12)
    assert not any(m == "a_morf" for m, *_ in result.rows)  # metric not asked for


def test_unanswerable_questions_are_explained_but_get_no_iou(tmp_path, t5):
    """An unanswerable SQuAD v2 question (no evidence) is explained and perturbed like any other; its answer is the
    empty string (SQuAD v2's official rule), and it never gets an iou row."""
    from dataclasses import replace

    model, tok = t5
    cell = _cell(tmp_path, "model=tiny_t5", "task=synthetic_squad", "method=grad_x_input")
    bundle = ModelBundle(cell.model, model, tok, "cpu")
    adapter = task_adapter(cell.task.kind)
    sample = adapter.load_samples(cell.task, bundle)[0]
    blank = replace(sample, sample_id="blank", target="", evidence=(), meta={"answers": [], "answerable": False})
    (result,) = adapter.evaluate(bundle, [blank], cell.context("cpu", None, 8), metrics=("attnlrp_perturbation", "iou"))
    metrics = {m for m, *_ in result.rows}
    assert {"a_morf", "a_lerf", "correct"} <= metrics and "iou" not in metrics
    answer = result.info["answer"]
    assert dict(((m, v), value) for m, v, _, value in result.rows)[("correct", "all")] == float(answer.strip() == "")


def test_squad_exact_match():
    assert normalize_answer("The  Normans, (Norse)!") == "normans norse"
    assert squad_exact_match("the 10th century", ["10th century"]) and squad_exact_match("Paris", ["x", "paris."])
    assert not squad_exact_match("8,320 m", ["8,320 m (27,300 ft)"])
