"""Text samples are explained at their real length (issue "Ready for the real run", item 5): the right padding
of IMDB-style samples (official protocol: padded to a fixed length, pads counted by the perturbation) is not fed
to the explanation, pads get relevance 0, and scores and curves equal those of the padded run within float32
rounding, for a tiny LLaMA classifier built from its config."""
import numpy as np
import pytest
import torch

import palrp_bench
from palrp_bench.data import synthetic_text
from palrp_bench.evaluation.procedures.nlp_perturbation import nlp_perturbation_curves
from palrp_bench.evaluation.tasks import ModelBundle, task_adapter
from palrp_bench.metrics.auc import NLP_FRACTIONS
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg

PAD_TO = 40


@pytest.fixture(scope="module")
def classifier():
    from transformers import LlamaForSequenceClassification

    torch.manual_seed(0)
    model = LlamaForSequenceClassification(synthetic_text.tiny_text_config("cls")).eval()
    return model, synthetic_text.build_tiny_tokenizer()


def _padded_reference(bundle, samples, cell):
    """The padded run: every sample explained and perturbed at its full padded length (one sample per call)."""
    out = {}
    for s in samples:
        n = s.meta["n_tokens"]
        ids = torch.tensor([s.input_ids])
        mask = torch.zeros_like(ids)
        mask[0, :n] = 1
        rel = palrp_bench.explain(bundle.model, ids, attention_mask=mask, method=cell.method,
                                  aggregation=cell.aggregation, protocol=cell.protocol)
        curves = nlp_perturbation_curves(bundle.model, ids, rel.scores.float(), task="imdb", attention_mask=mask,
                                         labels=[s.label], protocol=cell.protocol, tokenizer=bundle.tokenizer,
                                         show_progress=False)
        out[s.sample_id] = (rel.scores[0].float().numpy(), curves)
    return out


@pytest.mark.parametrize("method", ["pa_lrp", "grad_x_input"])
def test_unpadded_explanation_equals_the_padded_run(tmp_path, classifier, monkeypatch, method):
    model, tok = classifier
    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment", f"method={method}",
                                  f"task.options.pad_to={PAD_TO}", "protocol=official"))[0]
    bundle = ModelBundle(cell.model, model, tok, "cpu")
    adapter = task_adapter(cell.task.kind)
    samples = adapter.load_samples(cell.task, bundle)[:6]
    lengths = [s.meta["n_tokens"] for s in samples]
    assert all(len(s.input_ids) == PAD_TO for s in samples) and max(lengths) < PAD_TO and len(set(lengths)) > 2

    widths = []
    real_explain = palrp_bench.explain

    def spy(model, inputs, *args, **kwargs):
        widths.append(tuple(inputs.shape))
        return real_explain(model, inputs, *args, **kwargs)

    monkeypatch.setattr(palrp_bench, "explain", spy)
    results = adapter.evaluate(bundle, samples, cell.context("cpu", None, forward_batch_size=16))
    monkeypatch.undo()
    assert widths == [(len(samples), max(lengths))]  # one call, cut to the longest real sample, not to PAD_TO

    reference = _padded_reference(bundle, samples, cell)
    for s, result in zip(samples, results):
        n = s.meta["n_tokens"]
        scores, curves = reference[s.sample_id]
        assert (scores[n:] == 0).all()  # what the padded run gives the pads
        stored = result.explanation["scores"]
        assert stored.shape == (PAD_TO,) and (stored[n:] == 0).all()
        scale = max(np.abs(scores).max(), 1e-30)
        np.testing.assert_allclose(stored, scores, rtol=0, atol=64 * np.finfo(np.float32).eps * scale)
        rows = {(m, v, st): value for m, v, st, value in result.rows}
        for variant in ("generation", "pruning"):
            for metric in ("ac", "mse"):
                ours = np.array([rows[(metric, variant, st)] for st in NLP_FRACTIONS.labels])
                expected = curves[variant][metric][0]
                np.testing.assert_allclose(ours, expected, rtol=1e-5,
                                           atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def test_the_runner_explains_batches_of_similar_real_length(tmp_path, monkeypatch):
    from palrp_bench.app import run

    widths = []
    real_explain = palrp_bench.explain

    def spy(model, inputs, attention_mask=None, *args, **kwargs):
        widths.append([int(n) for n in attention_mask.sum(1)])
        return real_explain(model, inputs, attention_mask, *args, **kwargs)

    monkeypatch.setattr(palrp_bench, "explain", spy)
    cfg = compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment", "method=grad_x_input",
                      "task.selection=all", "runner.max_samples=9", "runner.batch_size=3", "runner.quiet=true")
    run(cfg, out=open("/dev/null", "w"))
    lengths = [n for batch in widths for n in batch]
    assert len(lengths) == 9 and lengths == sorted(lengths, reverse=True)  # longest first, 3 per batch
