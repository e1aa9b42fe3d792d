"""report.html (palrp_bench/report/html.py) without a browser: written by every run unless runner.html=false and by
``palrp-bench-report --html``, self-contained (nothing fetched), its tables hold the numbers of metrics.csv, and its
explorer data decode to the relevance the run stored (tokens, total / semantic / positional per token, maps)."""
from __future__ import annotations

import json
import math
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from palrp_bench.report.html import decode_scaled, encode_scaled, relevance_colour, write_html
from palrp_bench.report.tables import fmt
from palrp_bench.rundir import explanation_file, read_explanation
from report.html_fixture import html_run  # noqa: F401  (the shared run)


class _Page(HTMLParser):
    """Tags with their attributes, the text of every ``td.metric``, and the JSON blocks by id."""

    def __init__(self):
        super().__init__()
        self.tags, self.metric_cells, self.json, self._cell, self._script = [], [], {}, None, None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "td" and "metric" in attrs.get("class", ""):
            self._cell = [attrs, ""]
        if tag == "script" and attrs.get("type") == "application/json":
            self._script = [attrs["id"], ""]

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.metric_cells.append(self._cell)
            self._cell = None
        if tag == "script" and self._script is not None:
            self.json[self._script[0]] = json.loads(self._script[1])
            self._script = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data
        if self._script is not None:
            self._script[1] += data


def _page(path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _explorer(page: _Page, model: str) -> dict:
    return next(v for k, v in page.json.items() if k.startswith("explorer-data-") and v["model"] == model)


def test_every_run_writes_report_html_unless_switched_off(html_run):
    run_dir, facts = html_run
    assert (run_dir / "report.html").is_file()
    assert facts["html_before_last_run"] is False  # the earlier runs of the same directory had runner.html=false
    assert "report: " in (run_dir.parent / "run.out").read_text()


def test_the_run_caches_what_the_explorer_shows(html_run):
    """Token strings, the aggregation's per-token terms and the label (text); the per-patch term (vision)."""
    run_dir, _ = html_run
    cell = run_dir / "cells" / "tiny_llama_cls" / "synthetic_sentiment"
    for path in sorted((cell / "pa_lrp" / "explanations").glob("*.npz")):
        a = read_explanation(path)
        assert {"tokens", "semantic_term", "positional_term", "label"} <= set(a)
        n = len(a["tokens"])  # the real tokens; the scores run on over the sample's padding (0 there)
        assert len(a["semantic_term"]) == len(a["positional_term"]) == n <= len(a["scores"])
        assert not a["scores"][n:].any()
        np.testing.assert_allclose(a["positional_term"], np.abs(a["positional"]).sum((0, 1)), rtol=1e-6)
        total = a["semantic_term"] + a["positional_term"]
        np.testing.assert_allclose(a["scores"][:n], total / np.abs(total).max(), rtol=1e-5, atol=1e-7)
    vit = read_explanation(next((run_dir / "cells/tiny_vit/synthetic_shapes/pa_lrp/explanations").glob("*.npz")))
    assert vit["positional_term"].shape == vit["positional"].shape == (8, 8) and "label" in vit


def test_the_page_fetches_nothing(html_run):
    run_dir, _ = html_run
    text = (run_dir / "report.html").read_text(encoding="utf-8")
    assert not re.search(r"https?://", text)  # no URL at all, so nothing can be fetched
    page = _page(run_dir / "report.html")
    for tag, attrs in page.tags:
        assert tag not in ("link", "iframe", "object", "embed"), tag
        assert not (tag == "script" and "src" in attrs), attrs
        for name in ("src", "href", "xlink:href"):
            value = attrs.get(name)
            assert value is None or value.startswith(("#", "data:")), (tag, name, value)
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp and "img-src data: blob:" in csp


def test_the_tables_hold_the_numbers_of_metrics_csv(html_run):
    run_dir, _ = html_run
    metrics = pd.read_csv(run_dir / "metrics.csv", dtype={"variant": str})
    cells = {(a["data-model"], a["data-task"], a["data-method"], a["data-metric"], a["data-variant"]): (a, text)
             for a, text in _page(run_dir / "report.html").metric_cells}
    assert len(cells) == len(metrics) > 0
    for row in metrics.itertuples():
        attrs, text = cells[(row.model, row.task, row.method, row.metric, row.variant)]
        if math.isfinite(row.value):
            assert float(attrs["data-value"]) == row.value and text.startswith(fmt(row.value))
            if math.isfinite(row.ci_low):
                assert f"[{fmt(row.ci_low)}, {fmt(row.ci_high)}]" in text
        else:
            assert attrs["data-value"] == "" and text.startswith(("undefined", "-"))


def test_the_explorer_data_decode_to_the_stored_relevance(html_run):
    run_dir, _ = html_run
    page = _page(run_dir / "report.html")
    text = _explorer(page, "tiny_llama_cls")
    assert text["methods"] == ["attnlrp", "pa_lrp", "pe_only"] and len(text["ids"]) == 4
    assert set(text["labels"]) <= {"0", "1"} and all(text["labels"])
    for i, sid in enumerate(text["ids"]):
        detail = text["details"][i]
        for method in text["methods"]:
            stored = read_explanation(explanation_file(run_dir / "cells/tiny_llama_cls/synthetic_sentiment" / method,
                                                       sid))
            assert detail["tokens"] == [str(t) for t in stored["tokens"]]
            n = len(stored["tokens"])
            for key, name in (("t", "scores"), ("s", "semantic_term"), ("p", "positional_term")):
                blob = detail["m"][method][key]
                # int16 with one scale per array: every value within half a step, the largest exact
                np.testing.assert_allclose(decode_scaled(blob), stored[name][:n], rtol=0, atol=blob["k"] / 2 + 1e-12)
    vision = _explorer(page, "tiny_vit")
    assert vision["kind"] == "image_classification" and vision["details"][0]["image"].startswith("data:image/png")
    maps = vision["details"][0]["m"]["pa_lrp"]
    assert maps["t"]["shape"] == [64, 64] and maps["p"]["shape"] == [8, 8] and maps["t"]["bits"] == 8


def test_report_cli_writes_the_page_and_a_size_limit_lists_samples_without_explanations(html_run, tmp_path):
    from palrp_bench.report.cli import main

    run_dir, _ = html_run
    assert main([str(run_dir), "--html", "--no-plots", "--out", str(tmp_path), "--html-max-mb", "0"]) == 0
    page = _page(tmp_path / "report.html")
    text = _explorer(page, "tiny_llama_cls")
    assert len(text["ids"]) == 4 and all(d is None for d in text["details"])  # listed, metrics complete
    assert text["status"].startswith("partly embedded") and set(text["metrics"]) >= {"auac:generation"}


def test_scaled_arrays_and_colours():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 7)) * 1e-5  # tiny values (Gradient x Input) keep their relative precision
    for bits in (16, 8):
        blob = encode_scaled(x, bits)
        back = decode_scaled(blob)
        assert back.shape == x.shape and np.abs(back - x).max() <= blob["k"] / 2 * (1 + 1e-9)
        assert np.abs(back).max() == pytest.approx(np.abs(x).max())
    blob = encode_scaled(np.array([1.0, np.nan, -2.0]))
    assert blob["nonfinite"] == 1 and decode_scaled(blob)[1] == 0.0
    assert encode_scaled(np.zeros(3))["k"] == 0.0
    # a diverging map centred on 0: white-ish at 0, red for +1, blue for -1
    r, g, b = relevance_colour(0.0)
    assert min(r, g, b) > 240
    assert relevance_colour(1.0)[0] > 100 > relevance_colour(1.0)[2]
    assert relevance_colour(-1.0)[2] > 90 > relevance_colour(-1.0)[0]


def test_an_empty_run_renders(tmp_path):
    from palrp_bench.rundir import METRICS_CSV_COLUMNS, RESULT_COLUMNS

    path = write_html(tmp_path / "r.html", pd.DataFrame(columns=RESULT_COLUMNS),
                      pd.DataFrame(columns=METRICS_CSV_COLUMNS), [], 0.95)
    assert "no samples" in path.read_text()
