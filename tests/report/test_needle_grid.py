"""The needle grid of the report (palrp_bench/report/plots.py, docs/evidence.md "Needle in a haystack"): each bin is
the metric's own function on the bin's samples (hand-computed here), bins without a scored sample stay empty, results
without length and depth give no grid, and the pictures and the HTML tables are written."""
import numpy as np
import pandas as pd
import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.report.html import render_html
from palrp_bench.report.plots import needle_grid_metrics, needle_grids, plot_needle_grids
from palrp_bench.rundir import RESULT_COLUMNS, result_columns

#: per method, sample -> (length, depth, pg, relevance_semantic, relevance_positional)
SAMPLES = {
    "pa_lrp": {"a": (256, 0.0, 1, 3.0, 1.0), "b": (256, 0.0, 0, 2.0, 2.0), "c": (256, 1.0, 1, 4.0, 0.0),
               "d": (512, 0.0, 1, 1.0, 3.0)},
    "attnlrp": {"a": (256, 0.0, 1, 4.0, 0.0), "c": (256, 1.0, 0, 4.0, 0.0)},
}


def _results():
    rows = []
    for method, samples in SAMPLES.items():
        for sid, (length, depth, pg, s, p) in samples.items():
            cell = {"run": "r", "model": "m", "task": "needle", "protocol": "official", "method": method,
                    "sample_id": sid, "step": np.nan, "length": length, "depth": depth}
            rows += [{**cell, "metric": "pg", "variant": "default", "value": pg},
                     {**cell, "metric": "relevance_semantic", "variant": "all", "value": s},
                     {**cell, "metric": "relevance_positional", "variant": "all", "value": p}]
    return pd.DataFrame(rows).reindex(columns=result_columns(["length", "depth"]))


def test_each_bin_is_the_metric_on_its_samples():
    grids = {g.cell["method"]: g for g in needle_grids(_results(), "pg", "default")}
    g = grids["pa_lrp"]
    assert (g.lengths, g.depths) == ([256, 512], [0.0, 1.0])
    np.testing.assert_array_equal(g.values, [[50.0, 100.0], [100.0, np.nan]])  # 100 x the mean of pg
    np.testing.assert_array_equal(g.counts, [[2, 1], [1, 0]])
    a = grids["attnlrp"]  # the task's bins, whichever the method scored
    np.testing.assert_array_equal(a.values, [[100.0, np.nan], [0.0, np.nan]])
    share = {g.cell["method"]: g for g in needle_grids(_results(), "positional_share_percent", "all")}
    # pooled: 100 * sum P / (sum S + sum P) over the bin's samples
    np.testing.assert_allclose(share["pa_lrp"].values, [[100 * 3 / 8, 75.0], [0.0, np.nan]])
    assert share["pa_lrp"].higher_is_better is None and g.higher_is_better is True


def test_results_without_length_and_depth_have_no_grid(tmp_path):
    plain = _results()[RESULT_COLUMNS]
    assert needle_grids(plain, "pg", "default") == []
    assert plot_needle_grids(plain, tmp_path) == [] and not list(tmp_path.iterdir())


def test_the_pictures_and_the_html_tables(tmp_path):
    paths = plot_needle_grids(_results(), tmp_path, needle_grid_metrics("pg:default"))
    assert [p.name for p in paths] == ["needle_r_m_needle_pg_default.png",
                                       "needle_r_m_needle_positional_share_percent_all.png"]
    assert all(p.stat().st_size > 1000 for p in paths)
    page = render_html(_results(), pd.DataFrame(), [], 0.95, needle_metrics=needle_grid_metrics("pg:default"))
    assert page.count('<table class="needle">') == 4 and 'href="#needle"' in page
    assert 'data-value="50.0">50<br><small>n=2</small>' in page and 'data-value="">-<br><small>n=0</small>' in page


def test_a_bad_grid_metric_is_one_line():
    with pytest.raises(BadInputError, match="needle grid metric 'pg' is not <table metric>:<variant>"):
        needle_grid_metrics("pg")
    assert needle_grid_metrics("pg:key") == (("pg", "key"), ("positional_share_percent", "all"))
