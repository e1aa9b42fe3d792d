"""report.html in a real browser (headless Chromium through selenium and chromedriver): no console error, the tables
hold the numbers of metrics.csv, choosing a sample and switching to positional relevance paints every token in the
colour of its stored value, keyboard selection, the image overlay; a screenshot stays in the test's tmp dir.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them where they are missing) and selenium
(the ``dev`` extra); skipped with one line where any of them is missing."""
from __future__ import annotations

import math
import shutil
import tempfile
import time

import numpy as np
import pandas as pd
import pytest

from palrp_bench.report.html import relevance_colour
from palrp_bench.report.tables import fmt
from palrp_bench.rundir import explanation_file, read_explanation
from report.html_fixture import html_run  # noqa: F401  (the shared run)

pytestmark = pytest.mark.browser

#: the flags that run Chromium headless as root without a display, a GPU or any network traffic of its own
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


@pytest.fixture(scope="module")
def browser():
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("no selenium: pip install -e '.[dev]'")
    binary = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)),
                  None)
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        pytest.skip("no headless Chromium here: apt-get install chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="palrp-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def _errors(driver) -> list:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _rgb(css: str) -> tuple[int, int, int]:
    return tuple(int(float(v)) for v in css[css.index("(") + 1:css.index(")")].split(",")[:3])


def _stored_colours(values: np.ndarray) -> list[set]:
    """Per value the colours of its entry and the two next to it (the page colours the int16-rounded value, which
    can fall into the neighbouring one of 256 entries)."""
    top = np.abs(values).max()
    out = []
    for v in values:
        x = v / top if top > 0 else 0.0
        out.append({relevance_colour(x + d) for d in (-1 / 255, 0.0, 1 / 255)})
    return out


def test_the_page_in_chromium(browser, html_run, tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    run_dir, _ = html_run
    page = run_dir / "report.html"
    t0 = time.monotonic()
    browser.get(page.resolve().as_uri())
    loaded = time.monotonic() - t0
    assert browser.execute_script("return document.body.dataset.ready") == "1"
    assert _errors(browser) == []

    # the tables: every metrics.csv row, as value [low, high] and in data-* attributes
    cells = browser.execute_script(
        "return Array.from(document.querySelectorAll('td.metric')).map(td => [td.dataset.model, td.dataset.task,"
        " td.dataset.method, td.dataset.metric, td.dataset.variant, td.dataset.value, td.innerText]);")
    shown = {tuple(c[:5]): (c[5], c[6]) for c in cells}
    metrics = pd.read_csv(run_dir / "metrics.csv", dtype={"variant": str})
    assert len(shown) == len(metrics)
    for row in metrics.itertuples():
        value, text = shown[(row.model, row.task, row.method, row.metric, row.variant)]
        if math.isfinite(row.value):
            assert float(value) == row.value and text.startswith(fmt(row.value)), (row, text)

    # the text explorer: choose the second sample, switch to positional relevance
    explorer = browser.find_element(By.CSS_SELECTOR, "details.explorer[data-index='0']")
    assert "tiny_llama_cls" in explorer.text
    rows = explorer.find_elements(By.CSS_SELECTOR, "table.samples tbody tr")
    assert len(rows) == 4
    sample = rows[1].get_attribute("data-id")
    rows[1].click()
    panel = explorer.find_element(By.CSS_SELECTOR, "section.method[data-method='pa_lrp']")
    total = [t.value_of_css_property("background-color") for t in panel.find_elements(By.CSS_SELECTOR, ".tok")]
    explorer.find_element(By.CSS_SELECTOR, "input[type=radio][value=p]").click()
    panel = explorer.find_element(By.CSS_SELECTOR, "section.method[data-method='pa_lrp']")
    tokens = panel.find_elements(By.CSS_SELECTOR, ".tok")
    stored = read_explanation(explanation_file(run_dir / "cells/tiny_llama_cls/synthetic_sentiment/pa_lrp", sample))
    positional = stored["positional_term"]
    assert len(tokens) == len(positional) == len(stored["tokens"])
    colours = [_rgb(t.value_of_css_property("background-color")) for t in tokens]
    for j, (got, allowed) in enumerate(zip(colours, _stored_colours(positional))):
        assert got in allowed, (j, got, allowed)
    assert [_rgb(c) for c in total] != colours  # the switch repainted the tokens
    np.testing.assert_allclose([float(t.get_attribute("data-value")) for t in tokens], positional,
                               atol=np.abs(positional).max() / 32767)

    # hover: the token, its position and its three values
    ActionChains(browser).move_to_element(tokens[2]).perform()
    tip = browser.find_element(By.ID, "tooltip").text
    assert "at position 2" in tip and str(stored["tokens"][2]) in tip
    for name, key in (("positional", "positional_term"), ("semantic", "semantic_term"), ("total", "scores")):
        value = float(next(line for line in tip.splitlines() if line.startswith(name)).split()[1])
        assert value == pytest.approx(float(stored[key][2]), rel=2e-3, abs=float(np.abs(stored[key]).max()) / 3e4)

    # keyboard: the arrow keys move through the list, Enter chooses
    rows = explorer.find_elements(By.CSS_SELECTOR, "table.samples tbody tr")
    rows[0].send_keys(Keys.ARROW_DOWN)
    browser.switch_to.active_element.send_keys(Keys.ARROW_DOWN, Keys.ENTER)
    heading = explorer.find_element(By.CSS_SELECTOR, ".detail h4").text
    assert rows[2].get_attribute("data-id") in heading

    # the image explorer: the map over the image, with a text alternative
    vision = browser.find_element(By.CSS_SELECTOR, "details.explorer[data-index='1']")
    vision.find_element(By.TAG_NAME, "summary").click()
    vision.find_elements(By.CSS_SELECTOR, "table.samples tbody tr")[0].click()
    canvas = vision.find_element(By.CSS_SELECTOR, "section.method[data-method='pa_lrp'] canvas")
    assert "relevance over the image" in canvas.get_attribute("aria-label")
    browser.execute_script("arguments[0].scrollIntoView()", explorer)
    assert _errors(browser) == []
    shot = tmp_path / "report_html.png"
    assert browser.save_screenshot(str(shot))
    print(f"report.html: loaded in {loaded:.2f} s; screenshot {shot}")
