"""Size, build time and browser load time of report.html for a large run, without a model.

Builds a synthetic run directory shaped like a real one (``results.csv`` with the NLP curves and ``correct`` of every
sample and method, ``metrics.csv`` from it, one cached explanation per sample and method with tokens, scores and the
per-token semantic / positional terms; or, with ``--images``, 224 x 224 images with pixel maps), writes its
report.html (palrp_bench/report/html.py) and, where headless Chromium and chromedriver are installed, opens it and
measures the time to a usable page, to the first explorer's list and to one chosen sample.

    python scripts/bench_html_report.py                           # 3000 samples x 6 methods x 256 tokens
    python scripts/bench_html_report.py --samples 1000 --tokens 512  # IMDB-sized
    python scripts/bench_html_report.py --images --samples 2000 --methods 5
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.auc import NLP_FRACTIONS, VISION_STEPS
from ..metrics.table import table_metrics
from ..report.html import DEFAULT_MAX_MB, write_html
from ..rundir import RESULT_COLUMNS, explanation_file

METHODS = ["attnlrp", "pa_lrp", "pe_only", "pa_lrp_no_multisink", "cp_lrp", "grad_x_input"]


def synthetic_run(root: Path, n: int, n_methods: int, tokens: int, images: bool, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    task = "synthetic_shapes" if images else "synthetic_sentiment"
    model = "tiny_vit" if images else "tiny_llama_cls"
    base = dict(run=root.name, model=model, quantization="none", dtype="float32", task=task, paper_task=task,
                protocol="official", causal=True, tie_break="topk" if images else "", tie_device="cpu" if images else "",
                stabilizers="official", rules="attnlrp", aggregation="official", embeddings="")
    rows = []
    vocab = np.array([f"tok{i}" for i in range(500)])
    for method in METHODS[:n_methods]:
        cell = root / "cells" / model / task / method / "explanations"
        cell.mkdir(parents=True)
        for i in range(n):
            sid = f"s{i:05d}"
            if images:
                curves = {("agreement", v): np.sort(rng.random(len(VISION_STEPS)))[::-1] for v in ("positive", "negative")}
                steps = VISION_STEPS
                arrays = dict(scores=np.maximum(rng.normal(size=(224, 224)), 0).astype(np.float32),
                              semantic=rng.normal(size=(224, 224)).astype(np.float32),
                              positional=rng.normal(size=(14, 14)).astype(np.float32),
                              positional_term=rng.normal(size=(14, 14)).astype(np.float32),
                              image=rng.integers(0, 255, (3, 224, 224)).astype(np.uint8), label=np.asarray("3"))
            else:
                curves = {(m, v): rng.random(len(NLP_FRACTIONS.labels)) for m in ("ac", "mse")
                          for v in ("generation", "pruning")}
                steps = NLP_FRACTIONS.labels
                sem = rng.normal(size=tokens).astype(np.float32)
                pos = np.abs(rng.normal(size=tokens)).astype(np.float32)
                arrays = dict(scores=(sem + pos) / np.abs(sem + pos).max(), semantic=sem, semantic_term=sem,
                              positional_term=pos, positional=rng.normal(size=(2, 2, tokens)).astype(np.float32),
                              tokens=vocab[rng.integers(0, 500, tokens)], label=np.asarray(str(i % 2)))
            np.savez_compressed(explanation_file(cell.parent, sid), sample_id=np.asarray(sid), **arrays)
            for (metric, variant), values in curves.items():
                rows += [(method, sid, metric, variant, float(x), float(y)) for x, y in zip(steps, values)]
            rows.append((method, sid, "correct", "all", np.nan, float(rng.random() < 0.9)))
    df = pd.DataFrame(rows, columns=["method", "sample_id", "metric", "variant", "step", "value"])
    for k, v in base.items():
        df[k] = v
    return df[RESULT_COLUMNS]


def browser_times(page: Path) -> dict | None:
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        return None
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"):
        options.add_argument(flag)
    profile = tempfile.mkdtemp()
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        t0 = time.perf_counter()
        driver.get(page.resolve().as_uri())  # returns at the load event: scripts ran, the first explorer is built
        loaded = time.perf_counter() - t0
        nav = driver.execute_script("const t = performance.getEntriesByType('navigation')[0];"
                                    "return [t.domContentLoadedEventEnd, t.loadEventEnd];")
        row = driver.find_element(By.CSS_SELECTOR, "table.samples tbody tr")
        t0 = time.perf_counter()
        row.click()
        driver.find_element(By.CSS_SELECTOR, ".detail section.method")
        chosen = time.perf_counter() - t0
        return {"load_s": loaded, "dom_content_loaded_s": nav[0] / 1000, "load_event_s": nav[1] / 1000,
                "choose_sample_s": chosen}
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--methods", type=int, default=6)
    p.add_argument("--tokens", type=int, default=256)
    p.add_argument("--images", action="store_true", help="224 x 224 images with pixel maps instead of tokens")
    p.add_argument("--max-mb", type=float, default=DEFAULT_MAX_MB)
    args = p.parse_args()
    root = Path(tempfile.mkdtemp()) / "bench_run"
    t0 = time.perf_counter()
    df = synthetic_run(root, args.samples, args.methods, args.tokens, args.images)
    metrics = table_metrics(df, n_resamples=100).assign(paper_table="", published=np.nan, difference=np.nan)
    print(f"synthetic run: {args.samples} samples x {args.methods} methods, {len(df)} result rows "
          f"({time.perf_counter() - t0:.1f} s)")
    t0 = time.perf_counter()
    page = write_html(root / "report.html", df, metrics, [root], 0.95, max_mb=args.max_mb)
    print(f"report.html: {page.stat().st_size / 1e6:.1f} MB written in {time.perf_counter() - t0:.1f} s")
    times = browser_times(page)
    if times is None:
        print("no headless Chromium / chromedriver / selenium: browser times not measured")
    else:
        print("chromium: " + ", ".join(f"{k} {v:.2f}" for k, v in times.items()))
    shutil.rmtree(root.parent, ignore_errors=True)
