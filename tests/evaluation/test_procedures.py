"""The procedure registry (evaluation/procedures) is the one source of which procedure applies to which task kind and
what it costs: the plan, the cost model and the shared loop read it, and a procedure registered here (a test's own)
is applied, run and priced without touching them."""
from dataclasses import replace

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures import PROCEDURES, applies, register_procedure
from palrp_bench.evaluation.procedures.vision_perturbation import VISION_FORWARDS
from palrp_bench.evaluation.tasks import ModelBundle, TASK_KINDS, task_adapter
from palrp_bench.models.loading import load_model
from palrp_bench.planning.cost import architecture_of, load_constants, sample_work
from palrp_bench.rundir import SCALAR
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg


def test_every_procedure_applies_to_registered_task_kinds():
    kinds = set(TASK_KINDS.names())
    for name in PROCEDURES.names():
        assert PROCEDURES[name].applies_to and set(PROCEDURES[name].applies_to) <= kinds, name


def test_the_plan_refuses_a_procedure_on_a_kind_it_does_not_apply_to(tmp_path):
    assert not applies("segmentation", "next_token")
    with pytest.raises(BadInputError, match="metric 'segmentation' does not apply to task 'synthetic_mcqa'"):
        plan_cells(compose_cfg(tmp_path, "model=tiny_llama_causal", "task=synthetic_mcqa", "method=pa_lrp",
                               "metric=segmentation"))


@pytest.fixture
def token_count():
    """A procedure of this test: one row per sample counting its real tokens, priced at 3 forwards."""
    name = "token_count"

    @register_procedure(name, applies_to=("next_token",), forwards=lambda kind, shape, task: 3.0,
                        description="real tokens per sample")
    def run(batch, ctx):
        for j in batch.ok:
            batch.rows[j].append((name, "all", SCALAR, float(batch.attention_mask[j].sum())))

    yield name
    del PROCEDURES[name]


def test_a_registered_procedure_is_applied_run_and_priced(tmp_path, token_count):
    base = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_causal", "task=synthetic_mcqa", "method=pa_lrp"))[0]
    cell = replace(base, metrics=("nlp_perturbation", token_count))
    assert applies(token_count, cell.task.kind) and not applies(token_count, "text_classification")
    arch, constants = architecture_of(cell.model), load_constants()
    assert sample_work(cell, arch, constants).forwards == sample_work(base, arch, constants).forwards + 3.0
    model, tokenizer = load_model(cell.model, "cpu")
    bundle = ModelBundle(cell.model, model, tokenizer, "cpu")
    adapter = task_adapter(cell.task.kind)
    samples = list(adapter.load_samples(cell.task, bundle)[:3])
    results = adapter.evaluate(bundle, samples, cell.context("cpu", None, 64), (token_count, "nlp_perturbation"))
    for sample, result in zip(samples, results):
        counted = [r for r in result.rows if r[0] == token_count]
        assert counted == [(token_count, "all", SCALAR, float(sample.meta["n_tokens"]))]
        # the cell's order (nlp_perturbation first), whatever order the runner asks for them in; correct last
        assert result.rows[0][0] == "ac" and result.rows[-2][0] == token_count and result.rows[-1][0] == "correct"


def test_an_unregistered_task_kind_is_an_error_not_zero_work(tmp_path):
    cell = plan_cells(compose_cfg(tmp_path, "model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp"))[0]
    cell = replace(cell, task=replace(cell.task, kind="ranking"))
    with pytest.raises(BadInputError, match="unknown task kind 'ranking'"):
        sample_work(cell, architecture_of(cell.model), load_constants())


def test_the_explanations_a_procedure_adds_are_priced(tmp_path):
    """vision_perturbation explains the labelled class too (a second explanation), positional_share nothing."""
    cells = {c.task.name: c for c in plan_cells(compose_cfg(tmp_path, "model=tiny_vit", "method=pa_lrp"))}
    arch, constants = architecture_of(cells["synthetic_shapes"].model), load_constants()
    work = sample_work(cells["synthetic_shapes"], arch, constants)
    share = sample_work(replace(cells["synthetic_shapes"], metrics=("positional_share",)), arch, constants)
    assert (work.explanations, work.forwards) == (2, VISION_FORWARDS)
    assert (share.explanations, share.forwards) == (1, 0.0)
