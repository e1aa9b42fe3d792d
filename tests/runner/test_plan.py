"""Config -> cells -> jobs (docs/architecture.md "Data flow of one run"), including the one-line errors of bad names."""
import pytest
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, ValidationError

from palrp_bench.errors import BadInputError
from palrp_bench import catalog
from palrp_bench.runner.plan import plan_cells, plan_jobs
from palrp_bench.schema import GROUP_SCHEMAS, Selection
from runner.harness import compose_cfg

ISSUE_GROUPS = {
    "model": {"llama2_7b", "llama2_7b_4bit", "tinyllama", "llama3_8b", "deit_tiny", "deit_small", "deit_base",
              "tiny_llama_cls", "tiny_llama_causal", "tiny_vit"},
    "task": {"imdb", "wikipedia", "mcqa", "imagenet", "imagenet_seg"},
    "method": {"attnlrp", "pe_only", "pa_lrp", "pa_lrp_no_multisink", "grad_x_input", "cp_lrp"},
    "experiment": {"table1", "table2", "table3", "table4", "table5", "appendix_f", "smoke"},
}


@pytest.mark.parametrize("group", sorted(GROUP_SCHEMAS))
def test_every_shipped_group_file_validates(group):
    names = catalog.available(group)
    assert set(ISSUE_GROUPS.get(group, set())) <= set(names)
    for name in names:
        node = catalog.load(group, name)
        assert node.name == name  # file name and declared name agree


def test_method_files_match_the_registry():
    from palrp_bench.methods.registry import METHODS

    assert set(catalog.available("method")) == set(METHODS)


def test_metric_files_match_the_procedures():
    """``metric=<name>`` selects a registered procedure: the config group and the registry hold the same names."""
    from palrp_bench.evaluation.procedures import PROCEDURES

    assert set(catalog.available("metric")) == set(PROCEDURES.names())


def test_task_metrics_apply_to_their_task():
    from palrp_bench.evaluation.procedures import applies

    for name in catalog.available("task"):
        task = OmegaConf.to_object(catalog.load("task", name))
        for metric in task.metrics:
            assert applies(metric, task.kind), (name, metric)


def test_schema_rejects_bad_values_naming_the_key():
    schema = OmegaConf.structured(GROUP_SCHEMAS["task"])
    with pytest.raises(ValidationError, match="selection"):
        OmegaConf.merge(schema, {"selection": "sometimes"})
    with pytest.raises(ConfigKeyError, match="pool_sise"):
        OmegaConf.merge(schema, {"pool_sise": 3})


def test_single_cell_from_model_task_method(tmp_path):
    cfg = compose_cfg(tmp_path, "model=llama3_8b", "task=mcqa", "method=pa_lrp")
    (cell,) = plan_cells(cfg)
    assert cell.key == "llama3_8b/mcqa/pa_lrp"
    assert cell.metrics == ("nlp_perturbation",)
    assert cell.task.selection == Selection.correct_only and cell.task.select_count == 1000
    assert cell.model.quantization.value == "none" and cell.model.dtype.value == "bfloat16"


def test_experiment_cells_and_filters(tmp_path):
    cells = plan_cells(compose_cfg(tmp_path, "experiment=table1"))
    assert len(cells) == 9
    assert {c.model.name for c in cells} == {"llama2_7b", "llama2_7b_4bit", "tinyllama"}
    only = plan_cells(compose_cfg(tmp_path, "experiment=table1", "method=pa_lrp"))
    assert [c.key for c in only] == ["llama2_7b/imdb/pa_lrp", "llama2_7b_4bit/imdb/pa_lrp", "tinyllama/imdb/pa_lrp"]
    # a group override applies to the cells it selects
    custom = plan_cells(compose_cfg(tmp_path, "experiment=table1", "model=tinyllama", "model.source=/ckpt/tiny"))
    assert {c.model.source for c in custom} == {"/ckpt/tiny"} and len(custom) == 3


def test_metric_override_restricts_the_metrics(tmp_path):
    cells = plan_cells(compose_cfg(tmp_path, "experiment=table4", "metric=positional_share"))
    assert all(c.metrics == ("positional_share",) for c in cells) and len(cells) == 6
    appendix = plan_cells(compose_cfg(tmp_path, "experiment=appendix_f"))
    assert all(c.metrics == ("positional_share",) for c in appendix)


def test_bad_names_are_one_line_errors(tmp_path):
    with pytest.raises(BadInputError, match="no cell of experiment 'table1' matches task=imagenet"):
        plan_cells(compose_cfg(tmp_path, "experiment=table1", "task=imagenet"))
    with pytest.raises(BadInputError, match="metric 'segmentation' does not apply to task 'mcqa'"):
        plan_cells(compose_cfg(tmp_path, "model=llama3_8b", "task=mcqa", "method=pa_lrp", "metric=segmentation"))
    with pytest.raises(BadInputError, match="unknown rules 'lrp_magic'"):
        plan_cells(compose_cfg(tmp_path, "experiment=selftest", "rules=lrp_magic"))
    with pytest.raises(BadInputError, match="unknown task 'imdbb'"):
        catalog.load("task", "imdbb")


def test_jobs_shards_and_validation(tmp_path):
    cfg = compose_cfg(tmp_path, "experiment=selftest")
    cells = plan_cells(cfg)
    jobs = plan_jobs(cfg, cells, n_workers=3)  # n_shards defaults to one per worker
    assert [j.name for j in jobs] == [f"selftest/selftest/{m}#{s}/3" for m in ("attnlrp", "pa_lrp") for s in range(3)]
    cfg = compose_cfg(tmp_path, "experiment=selftest", "runner.n_shards=4", "runner.shard=2")
    assert [(j.shard, j.n_shards) for j in plan_jobs(cfg, plan_cells(cfg), 1)] == [(2, 4), (2, 4)]
    for overrides, message in ((["runner.n_shards=2", "runner.shard=2"], "out of range"),
                               (["runner.shard=0"], "runner.n_shards is not"),
                               (["runner.batch_size=0"], "batch_size must be a positive integer"),
                               (["runner.max_samples=0"], "max_samples must be >= 1")):
        cfg = compose_cfg(tmp_path, "experiment=selftest", *overrides)
        with pytest.raises(BadInputError, match=message):
            plan_jobs(cfg, plan_cells(cfg), 1)


def test_cell_settings_exclude_what_does_not_change_values(tmp_path):
    a = plan_cells(compose_cfg(tmp_path, "model=llama3_8b", "task=wikipedia", "method=pa_lrp"))[0]
    b = plan_cells(compose_cfg(tmp_path, "model=llama3_8b", "task=wikipedia", "method=pa_lrp",
                               "task.pool_size=10"))[0]
    c = plan_cells(compose_cfg(tmp_path, "model=llama3_8b", "task=wikipedia", "method=pa_lrp", "protocol=corrected"))[0]
    assert a.fingerprint() == b.fingerprint() != c.fingerprint()
    assert a.task.kind == "next_token"


@pytest.mark.parametrize("kind", ["classifier", "masked_lm"])
def test_a_pixels_only_method_on_any_text_head_is_refused_when_planning(tmp_path, kind):
    cfg = compose_cfg(tmp_path / "run", "model=bert_base", f"model.kind={kind}", "task=synthetic_sentiment",
                      "method=attnlrp_gamma_b4")
    with pytest.raises(BadInputError, match="defined for pixels models, not tokens"):
        plan_cells(cfg)
