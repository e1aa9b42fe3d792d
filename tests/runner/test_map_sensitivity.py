"""``runner.map_sensitivity=true`` (docs/evaluation.md, "Maps that rounding decides"): every sample explained once
more by a float64 copy of the model; ``map_sensitivity`` per sample in results.csv and the share above 1e-3 in
metrics.csv, on the embedded tiny models through the CLI and the runner. The metric's arithmetic by hand:
tests/metrics/test_sensitivity.py; its price: tests/planning/test_cost.py."""
import copy
import logging
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from palrp_bench import explain
from palrp_bench.app import run
from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures.map_sensitivity import _float64_copy, float64_model
from palrp_bench.evaluation.tasks.base import ModelBundle
from palrp_bench.metrics.sensitivity import SENSITIVE_ABOVE, map_sensitivity
from palrp_bench.runner.plan import plan_cells
from palrp_bench.runner.store import ExplanationCache, iter_cell_records
from palrp_bench.schema import Quantization
from runner.harness import compose_cfg, per_sample_values, read_results, run_cli

#: synthetic test image 120: its pa_lrp map (official stabilisers) lies 2.3e-2 (native and AVX2 kernels) / 3.8e-2
#: (baseline kernels) from the float64 map, and moves by 5e-2 under 1e-6 relative input noise; 8e-7 with
#: stabilizers=none
ILL_CONDITIONED = "synthetic-test-s0-00120"
#: synthetic test image 0: 7e-7 to 1.1e-6 from its float64 map (float32 rounding)
WELL_CONDITIONED = "synthetic-test-s0-00000"


def _values(run_dir) -> pd.Series:
    df = read_results(run_dir)
    rows = df[df.metric == "map_sensitivity"]
    assert (rows.variant == "all").all() and rows.step.isna().all()
    return rows.set_index("sample_id")["value"]


def _table_row(run_dir) -> dict:
    metrics = pd.read_csv(run_dir / "metrics.csv")
    (row,) = metrics[metrics.metric == "map_sensitivity"].to_dict("records")
    return row


def test_vision_the_map_rounding_decides_stands_out_through_the_cli(tmp_path):
    """The first 121 synthetic test images on the tiny ViT, ``pa_lrp`` with its default (official) stabilisers,
    the map sensitivity alone: image 120 lies far above 1e-3, image 0 at float32 rounding; the row equals the
    formula applied by hand to the run's cached map and the map of a float64 copy of the model."""
    from palrp_bench.data.synthetic_vision import load_tiny_vit, make_synthetic_vision
    from palrp_bench.evaluation.procedures.vision_perturbation import resolve_normalization

    run_dir = tmp_path / "run"
    done = run_cli("model=tiny_vit", "task=synthetic_shapes", "method=pa_lrp", "task.options.n=121",
                   "metric=map_sensitivity", "runner.map_sensitivity=true", "runner.batch_size=64",
                   "runner.devices=[cpu]", "runner.quiet=true", f"run_dir={run_dir}", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    values = _values(run_dir)
    assert len(values) == 121
    assert values[ILL_CONDITIONED] > 10 * SENSITIVE_ABOVE and values[WELL_CONDITIONED] < 1e-5, values.describe()
    row = _table_row(run_dir)
    assert row["variant"] == "share_above_1e-3" and row["n"] == 121 and row["n_nonfinite"] == 0
    assert row["value"] == pytest.approx(100 * float((values > SENSITIVE_ABOVE).mean()))
    assert "map_sensitivity:share_above_1e-3" in done.stdout  # the summary shows it

    cached = ExplanationCache(run_dir / "cells" / "tiny_vit" / "synthetic_shapes" / "pa_lrp").load(ILL_CONDITIONED)
    model64 = copy.deepcopy(load_tiny_vit()).double()
    image = torch.as_tensor(make_synthetic_vision(121, 0, "test")[120].image)[None]
    pixels = resolve_normalization(model64)(image).double()
    exact = explain(model64, pixels, method="pa_lrp", target=int(cached["explained"])).scores
    expected = map_sensitivity(torch.as_tensor(cached["scores"])[None], exact)[0]
    assert values[ILL_CONDITIONED] == pytest.approx(expected, rel=1e-9)


def test_text_maps_added_to_a_finished_run_reuse_its_explanations(tmp_path):
    """The tiny LLaMA classifier on synthetic sentiment: switching ``runner.map_sensitivity`` on for a finished
    run computes only the missing metric, from the cached explanations (no float32 explanation is redone), leaves
    every other row as it was, and finds every map well conditioned (<= 9.3e-7 measured)."""
    from palrp_bench.data.registry import load_dataset
    from palrp_bench.data.synthetic_text import load_tiny_text_model
    from palrp_bench.data.text_common import real_token_count

    run_dir = tmp_path / "run"
    cell = ("model=tiny_llama_cls", "task=synthetic_sentiment", "method=pa_lrp", "runner.quiet=true",
            "runner.devices=[cpu]")
    first = run(compose_cfg(run_dir, *cell), out=open("/dev/null", "w"))
    before = read_results(run_dir)
    second = run(compose_cfg(run_dir, *cell, "runner.map_sensitivity=true"), out=open("/dev/null", "w"))
    after = read_results(run_dir)
    n = sum(r.n_computed for r in first.reports)
    assert n >= 20 and sum(r.n_computed for r in second.reports) == n  # every sample, for the new metric only
    pd.testing.assert_series_equal(per_sample_values(after[after.metric != "map_sensitivity"]),
                                   per_sample_values(before))
    values = _values(run_dir)
    assert len(values) == n and float(values.max()) < 1e-5
    assert _table_row(run_dir)["value"] == 0.0
    cell_dir = run_dir / "cells" / "tiny_llama_cls" / "synthetic_sentiment" / "pa_lrp"
    added = [r for _, r in iter_cell_records(cell_dir) if r["metrics"] == ["map_sensitivity"]]
    assert len(added) == n and not any("forward_passes" in r["info"] for r in added)  # explanations from the cache

    sid = values.index[0]
    task = compose_cfg(run_dir, *cell).task
    sample = next(s for s in load_dataset(task.dataset, options=task.options) if s.sample_id == sid)
    cached = ExplanationCache(cell_dir).load(sid)
    real = real_token_count(sample)
    model64 = copy.deepcopy(load_tiny_text_model("cls")).double()
    exact = explain(model64, torch.tensor([sample.input_ids[:real]]), method="pa_lrp",
                    target=int(cached["explained"])).scores
    expected = map_sensitivity(torch.as_tensor(cached["scores"][:real])[None], exact)[0]
    assert values[sid] == pytest.approx(expected, rel=1e-6)


def test_the_switch_adds_the_metric_where_a_float64_map_exists(tmp_path, caplog):
    """Default off; on, every cell of the embedded experiment takes it; encoder-decoder QA (no map sensitivity
    there) and NF4 models (no float64 copy) are named in one warning and keep their metrics."""
    smoke = plan_cells(compose_cfg(tmp_path, "experiment=smoke"))
    assert all("map_sensitivity" not in c.metrics for c in smoke)
    on = plan_cells(compose_cfg(tmp_path, "experiment=smoke", "runner.map_sensitivity=true"))
    assert [c.metrics for c in on] == [(*c.metrics, "map_sensitivity") for c in smoke]
    with caplog.at_level(logging.WARNING, logger="palrp_bench.runner"):
        (t5,) = plan_cells(compose_cfg(tmp_path, "model=tiny_t5", "task=synthetic_squad", "method=attnlrp",
                                       "runner.map_sensitivity=true"))
        nf4 = plan_cells(compose_cfg(tmp_path, "experiment=table1", "model=llama2_7b_4bit",
                                     "runner.map_sensitivity=true"))
    assert "map_sensitivity" not in t5.metrics and all("map_sensitivity" not in c.metrics for c in nf4)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and "no float64 maps for tiny_t5/synthetic_squad" in warnings[0]
    assert "llama2_7b_4bit/imdb" in warnings[1] and "unquantized models" in warnings[1]


def test_an_nf4_model_is_refused_in_one_line():
    bundle = ModelBundle(SimpleNamespace(name="llama2_7b_4bit", quantization=Quantization.nf4),
                         torch.nn.Linear(2, 2), None, "cpu")
    with pytest.raises(BadInputError, match="needs a float64 copy of llama2_7b_4bit, and a nf4 model has none") as err:
        float64_model(bundle)
    assert "runner.map_sensitivity=false" in err.value.fix and "\n" not in str(err.value)


def test_the_float64_copy_keeps_ties_and_integer_buffers_and_leaves_the_model_alone():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight
            self.register_buffer("positions", torch.arange(4))
            self.register_buffer("scale", torch.full((3,), 0.5, dtype=torch.bfloat16))

    model = Tied().to(torch.bfloat16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bundle = ModelBundle(SimpleNamespace(name="tied", quantization=Quantization.none), model, None, "cpu")
    twin = float64_model(bundle)
    assert float64_model(bundle) is twin and twin is not model  # made once per bundle
    assert twin.head.weight is twin.embed.weight and twin.embed.weight.dtype == torch.float64
    assert twin.positions.dtype == torch.int64 and twin.scale.dtype == torch.float64
    assert torch.equal(twin.embed.weight, model.embed.weight.double()) and not twin.training
    assert all(torch.equal(before[k], v) and v.dtype == before[k].dtype for k, v in model.state_dict().items())
    assert isinstance(_float64_copy(model).embed.weight, torch.nn.Parameter)
