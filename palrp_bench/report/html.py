"""``report.html``: one self-contained page of a run a reader explores in a browser (docs/evaluation.md, "The HTML
report").

Everything comes from the run directory (``results.csv``, ``metrics.csv`` with the published numbers attached, the
cached explanations ``cells/<model>/<task>/<method>/explanations/*.npz``); nothing is recomputed but what the other
report files compute the same way (the tables of :mod:`.tables`, the curve bands of :func:`.plots.mean_band`, the
per-sample metric values of :meth:`palrp_bench.metrics.table.MetricSamples.per_sample`). The page needs no network:
scripts and styles are inline (``report/assets``), images are ``data:`` URIs, curves inline SVG, and a
Content-Security-Policy forbids every other source.

* tables: per (run, model, task) the methods x table metrics as ``value [low, high]`` with the published number and
  the difference where the paper has one (the numbers of ``metrics.csv``; each cell carries them in ``data-*``
  attributes), then the paper-shaped tables and the paired comparisons;
* curves: the sample-mean perturbation curves with their bands as inline SVG, each with its values as a table;
* needle grids (results with ``length`` and ``depth``, the needle in a haystack): per (run, model, task) and grid
  metric (:func:`.plots.needle_grid_metrics`) one table per method, depths down and lengths across, each bin
  coloured as the report's ``needle_*.png`` (:func:`.plots.needle_scale`) with its value and sample count;
* the sample explorer, one per (run, model, task): a sortable, filterable, paged list of the samples (id, label,
  correctness, any per-sample metric of a method and its difference to another method's), and for the chosen
  sample every method side by side: tokens coloured by relevance (semantic / positional / total, hover or
  keyboard for the values) or the image with the map as an overlay (opacity slider), and the sample's curves.

The per-sample data sit in one ``<script type="application/json">`` block per explorer, parsed only when that
explorer is opened; relevance arrays are base64 inside it (:func:`encode_scaled`: int16 per token, int8 per map
cell, each with its scale) and decoded only for the chosen sample, so a run of thousands of samples is a page of a
few elements until the reader asks for more. ``max_mb`` bounds the embedded explanations (samples past it are listed
with their metrics, marked "not embedded").

Colours: one diverging map centred on 0 (matplotlib's ``RdBu_r``, ColorBrewer's colour-blind-safe red-blue, the
same as the report's PNG galleries), each array divided by its own max ``|value|`` (:func:`relevance_colour`), and
the Okabe-Ito palette with distinct dash patterns for the methods' curves.
"""
from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.registry import curve_inputs
from ..metrics.table import MetricSamples, metric_samples, wide_values
from ..rundir import MANIFEST_JSON, explanation_file, read_explanation
from .plots import (DIVERGING_CMAP, _task_kind, bin_label, curve_axes, ink_on, length_label, mean_band,
                    needle_grids_by_task, needle_scale, table_metric_of)
from ..metrics.published import direction
from .tables import Notes, Table, arrow, fmt, interval_text

__all__ = ["render_html", "write_html", "relevance_colour", "colour_table", "encode_scaled", "decode_scaled",
           "DEFAULT_MAX_MB", "HTML_NAME"]

HTML_NAME = "report.html"
#: the embedded explanations of one page, in MB (the tables, curves and per-sample metrics are always complete)
DEFAULT_MAX_MB = 30.0
#: maps larger than this many cells per side are shown as block means (the overlay of a 224 x 224 image: 56 x 56)
MAP_CELLS = 64
#: Okabe & Ito's colour-blind-safe palette, then line dash patterns, cycled over the methods of a curve
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
DASHES = ("", "6 3", "2 2", "8 3 2 3", "12 4", "4 1")
ASSETS = Path(__file__).resolve().parent / "assets"
#: the page fetches nothing: inline scripts and styles, data: images only
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data: blob:; "
       "base-uri 'none'; form-action 'none'")
_LUT_SIZE = 256


# ----------------------------------------------------------------------------------------------------------------
# colours and compact arrays
# ----------------------------------------------------------------------------------------------------------------

def colour_table() -> list[str]:
    """The diverging map as 256 ``#rrggbb`` entries, index 0 = -1, 255 = +1 (what the page's script uses)."""
    from matplotlib import colormaps

    cmap = colormaps[DIVERGING_CMAP]
    rgb = (np.asarray(cmap(np.linspace(0.0, 1.0, _LUT_SIZE)))[:, :3] * 255).round().astype(int)
    return ["#%02x%02x%02x" % tuple(c) for c in rgb]


def relevance_colour(x: float) -> tuple[int, int, int]:
    """The RGB colour of a relevance already divided by its array's max ``|value|`` (``x`` in [-1, 1]; the page's
    ``colourOf``): entry ``round((x + 1) / 2 * 255)`` of :func:`colour_table`."""
    x = 0.0 if not math.isfinite(x) else min(1.0, max(-1.0, x))
    entry = colour_table()[int(round((x + 1.0) / 2.0 * (_LUT_SIZE - 1)))]
    return int(entry[1:3], 16), int(entry[3:5], 16), int(entry[5:7], 16)


def encode_scaled(values: np.ndarray, bits: int = 16) -> dict:
    """``values`` (any shape, float) as ``{"b": base64 of int16 / int8 little-endian, "k": scale, "shape": [...]}``
    with ``value ~= int * k``, ``k = max|values| / (2**(bits-1) - 1)`` (so the largest magnitude is exact and every
    value is within ``k / 2``); non-finite values become 0 and are counted in ``"nonfinite"``."""
    x = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(x)
    x = np.where(bad, 0.0, x)
    top = float(np.abs(x).max()) if x.size else 0.0
    levels = 2 ** (bits - 1) - 1
    scale = top / levels if top > 0 else 0.0
    q = np.round(x / scale).astype(np.int64) if scale > 0 else np.zeros(x.shape, np.int64)
    dtype = "<i2" if bits == 16 else "<i1"
    out = {"b": base64.b64encode(np.clip(q, -levels, levels).astype(dtype).tobytes()).decode("ascii"),
           "k": scale, "shape": list(x.shape), "bits": bits}
    if bad.any():
        out["nonfinite"] = int(bad.sum())
    return out


def decode_scaled(blob: dict) -> np.ndarray:
    """The inverse of :func:`encode_scaled` (what the page's ``decodeScaled`` computes)."""
    dtype = "<i2" if blob["bits"] == 16 else "<i1"
    q = np.frombuffer(base64.b64decode(blob["b"]), dtype=dtype).astype(np.float64)
    return (q * blob["k"]).reshape(blob["shape"])


def _float32(values) -> str:
    """A float array as base64 little-endian float32 (NaN stays NaN: the page shows it as missing)."""
    return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode("ascii")


def _block_mean(x: np.ndarray, cells: int = MAP_CELLS) -> np.ndarray:
    """A ``[H, W]`` map as block means so that no side exceeds ``cells`` (integer factor; edges padded with the
    mean of what is there)."""
    x = np.asarray(x, dtype=np.float64)
    f = max(1, math.ceil(max(x.shape) / cells))
    if f == 1:
        return x
    h, w = math.ceil(x.shape[0] / f), math.ceil(x.shape[1] / f)
    padded = np.full((h * f, w * f), np.nan)
    padded[:x.shape[0], :x.shape[1]] = x
    return np.nanmean(padded.reshape(h, f, w, f), axis=(1, 3))


def _image_uri(image: np.ndarray) -> str:
    """A cached ``[3, H, W]`` uint8 image as a ``data:`` URI: PNG up to 64 x 64 pixels, JPEG (quality 85) above."""
    from PIL import Image

    img = np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3):
        img = np.transpose(img, (1, 2, 0))
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[..., 0]
    if img.dtype != np.uint8:
        img = (np.clip(img, 0, 1) * 255).round().astype(np.uint8) if img.max() <= 1.0 else img.astype(np.uint8)
    buf = io.BytesIO()
    small = img.shape[0] * img.shape[1] <= 64 * 64
    Image.fromarray(img).save(buf, "PNG" if small else "JPEG", **({"optimize": True} if small else {"quality": 85}))
    return f"data:image/{'png' if small else 'jpeg'};base64," + base64.b64encode(buf.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------------------------------------------
# tables
# ----------------------------------------------------------------------------------------------------------------

def _esc(x) -> str:
    return html.escape(str(x), quote=True)


def _number_attr(x) -> str:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return ""
    return repr(v) if math.isfinite(v) else ""


def _cell_tables_html(metrics: pd.DataFrame, confidence: float) -> str:
    """One table per (run, model, task): methods x ``metric:variant``; each cell ``value [low, high]`` (as the
    printed summary), the published number and the difference where the paper has one, and the ``metrics.csv``
    numbers in ``data-*`` attributes."""
    if metrics.empty:
        return "<p>no table numbers in the run</p>"
    df = metrics.copy()
    df["variant"] = df["variant"].astype(str)
    for col in ("note", "paper_table"):
        df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str) if col in df.columns else ""
    for col in ("published", "difference"):
        if col not in df.columns:
            df[col] = np.nan
    out = []
    for k, ((run, model, task), block) in enumerate(df.groupby(["run", "model", "task"], sort=True)):
        notes = Notes()
        columns = sorted({(m, v) for m, v in zip(block["metric"], block["variant"])})
        head = "".join(f'<th scope="col">{_esc(m)}:{_esc(v)}{_esc(arrow(direction(m, v)))}</th>' for m, v in columns)
        rows = []
        for method, mdf in block.groupby("method", sort=True):
            cells = [f'<th scope="row">{_esc(method)}</th>', f'<td class="num">{int(mdf["n"].max())}</td>',
                     f'<td class="num">{int(mdf["n_nonfinite"].max())}</td>']
            for m, v in columns:
                hit = mdf[(mdf["metric"] == m) & (mdf["variant"] == v)]
                if not len(hit):
                    cells.append("<td>-</td>")
                    continue
                row = hit.iloc[0]
                text = _esc(interval_text(row, notes))
                value = row["value"]
                shown = fmt(value) if isinstance(value, (int, float)) and math.isfinite(value) else ""
                extra = ""
                if isinstance(row["published"], (int, float)) and math.isfinite(row["published"]):
                    extra = (f'<span class="paper">paper {fmt(row["published"])}, '
                             f'&Delta; {fmt(row["difference"])}</span>')
                attrs = (f'data-run="{_esc(run)}" data-model="{_esc(model)}" data-task="{_esc(task)}" '
                         f'data-method="{_esc(method)}" data-metric="{_esc(m)}" data-variant="{_esc(v)}" '
                         f'data-value="{_number_attr(value)}" data-ci-low="{_number_attr(row["ci_low"])}" '
                         f'data-ci-high="{_number_attr(row["ci_high"])}" data-shown="{shown}" '
                         f'data-published="{_number_attr(row["published"])}" '
                         f'data-difference="{_number_attr(row["difference"])}"')
                cells.append(f'<td class="metric" {attrs}>{text}{extra}</td>')
            rows.append("<tr>" + "".join(cells) + "</tr>")
        first = block.iloc[0]
        caption = (f"{model} / {task} (run {run}; protocol={first['protocol']}, causal={first['causal']}, "
                   f"aggregation={first['aggregation']}; value [{int(round(confidence * 100))}% BCa CI])")
        foot = "".join(f"<li>{_esc(n)}</li>" for n in notes.lines())
        out.append(f'<div class="table-wrap"><table class="cell-table" id="cell-table-{k}">'
                   f"<caption>{_esc(caption)}</caption><thead><tr><th scope=\"col\">method</th>"
                   f'<th scope="col">n</th><th scope="col">non-finite</th>{head}</tr></thead>'
                   f"<tbody>{''.join(rows)}</tbody></table>"
                   + (f'<ul class="notes">{foot}</ul>' if foot else "") + "</div>")
    return "\n".join(out)


def _table_html(table: Table) -> str:
    """A :class:`~.tables.Table` (paper-shaped or paired) as an HTML table with its title as caption."""
    body = table.frame.to_html(border=0, classes="paper-table", escape=True, na_rep="-")
    end = body.index(">") + 1  # after the opening <table ...> tag
    body = body[:end] + f"<caption>{_esc(table.title)}</caption>" + body[end:]
    foot = "".join(f"<li>{_esc(n)}</li>" for n in table.notes)
    return f'<div class="table-wrap">{body}' + (f'<ul class="notes">{foot}</ul>' if foot else "") + "</div>"


# ----------------------------------------------------------------------------------------------------------------
# curves as inline SVG
# ----------------------------------------------------------------------------------------------------------------

def _ticks(low: float, high: float, n: int = 5) -> list[float]:
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low] if math.isfinite(low) else [0.0]
    raw = (high - low) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((s * mag for s in (1, 2, 2.5, 5, 10) if s * mag >= raw), default=10 * mag)
    start = math.ceil(low / step) * step
    return [round(start + i * step, 10) for i in range(int((high - start) / step + 1e-9) + 1)]


@dataclass
class _Curve:
    method: str
    steps: np.ndarray
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    label: str


def _curve_svg(curves: list[_Curve], title: str, xlabel: str, ylabel: str, uid: str) -> str:
    """One curve plot: axes with ticks and labels, each method's mean as a line (palette colour, dash pattern and
    marker of its own) over its band, a legend; ``<title>`` / ``<desc>`` and a table of the values as text."""
    w, h, left, right, top, bottom = 460, 280, 56, 12, 12, 44
    xs = np.concatenate([c.steps for c in curves])
    lows = np.concatenate([c.low for c in curves])
    highs = np.concatenate([c.high for c in curves])
    x0, x1 = float(np.nanmin(xs)), float(np.nanmax(xs))
    y0, y1 = float(np.nanmin(lows)), float(np.nanmax(highs))
    if not (math.isfinite(y0) and math.isfinite(y1)):
        y0, y1 = 0.0, 1.0
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    pad = 0.04 * (y1 - y0)
    y0, y1 = y0 - pad, y1 + pad
    sx = lambda x: left + (x - x0) / ((x1 - x0) or 1.0) * (w - left - right)  # noqa: E731
    sy = lambda y: top + (y1 - y) / (y1 - y0) * (h - top - bottom)  # noqa: E731
    parts = [f'<svg class="curve" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
             f'aria-labelledby="{uid}-t {uid}-d"><title id="{uid}-t">{_esc(title)}</title>'
             f'<desc id="{uid}-d">{_esc(ylabel)} against {_esc(xlabel)}, mean over samples per method with its band; '
             f'the values are in the table below the plot</desc>',
             f'<rect x="{left}" y="{top}" width="{w - left - right}" height="{h - top - bottom}" class="plot-bg"/>']
    for t in _ticks(y0, y1):
        y = sy(t)
        parts.append(f'<line x1="{left}" x2="{w - right}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                     f'<text x="{left - 4}" y="{y + 3:.1f}" class="tick" text-anchor="end">{t:g}</text>')
    for t in sorted(set(np.round(xs, 10))):
        x = sx(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{h - bottom}" y2="{h - bottom + 4}" class="axis"/>'
                     f'<text x="{x:.1f}" y="{h - bottom + 15}" class="tick" text-anchor="middle">{t:g}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 6}" class="label" text-anchor="middle">'
                 f'{_esc(xlabel)}</text><text transform="translate(13 {(top + h - bottom) / 2}) rotate(-90)" '
                 f'class="label" text-anchor="middle">{_esc(ylabel)}</text>')
    for k, c in enumerate(curves):
        colour, dash = PALETTE[k % len(PALETTE)], DASHES[k % len(DASHES)]
        ok = np.isfinite(c.mean)
        band = [(sx(x), sy(y)) for x, y in zip(c.steps[ok], c.high[ok])] + \
               [(sx(x), sy(y)) for x, y in zip(c.steps[ok][::-1], c.low[ok][::-1])]
        if band:
            parts.append(f'<polygon points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in band)}" fill="{colour}" '
                         f'fill-opacity="0.14" stroke="none"/>')
        line = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in zip(c.steps[ok], c.mean[ok]))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.8" '
                     f'stroke-dasharray="{dash}"><title>{_esc(c.label)}</title></polyline>')
        parts += [_marker(k, sx(x), sy(y), colour) for x, y in zip(c.steps[ok], c.mean[ok])]
    parts.append("</svg>")
    legend = "".join(
        f'<li><svg width="34" height="10" aria-hidden="true"><line x1="1" x2="33" y1="5" y2="5" '
        f'stroke="{PALETTE[k % len(PALETTE)]}" stroke-width="2" stroke-dasharray="{DASHES[k % len(DASHES)]}"/>'
        f"{_marker(k, 17, 5, PALETTE[k % len(PALETTE)])}</svg> {_esc(c.label)}</li>" for k, c in enumerate(curves))
    steps = sorted(set(np.round(xs, 10)))
    head = "".join(f'<th scope="col">{s:g}</th>' for s in steps)
    rows = ""
    for c in curves:
        by = {round(float(x), 10): y for x, y in zip(c.steps, c.mean)}
        rows += f'<tr><th scope="row">{_esc(c.method)}</th>' + "".join(
            f'<td class="num">{fmt(by.get(s))}</td>' for s in steps) + "</tr>"
    values = (f'<details class="values"><summary>values (sample means)</summary><table><thead><tr>'
              f'<th scope="col">method</th>{head}</tr></thead><tbody>{rows}</tbody></table></details>')
    return (f'<figure class="curve-figure">{"".join(parts)}<figcaption>{_esc(title)}'
            f'<ul class="legend">{legend}</ul></figcaption>{values}</figure>')


def _marker(k: int, x: float, y: float, colour: str) -> str:
    shape = k % 4
    if shape == 0:
        return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.6" fill="{colour}"/>'
    if shape == 1:
        return f'<rect x="{x - 2.4:.1f}" y="{y - 2.4:.1f}" width="4.8" height="4.8" fill="{colour}"/>'
    if shape == 2:
        return f'<polygon points="{x:.1f},{y - 3:.1f} {x + 3:.1f},{y + 2.4:.1f} {x - 3:.1f},{y + 2.4:.1f}" fill="{colour}"/>'
    return f'<polygon points="{x:.1f},{y - 3:.1f} {x + 3:.1f},{y:.1f} {x:.1f},{y + 3:.1f} {x - 3:.1f},{y:.1f}" fill="{colour}"/>'


def _curves_html(df: pd.DataFrame, metrics: pd.DataFrame, confidence: float) -> str:
    curves = df[df["metric"].isin(curve_inputs())]
    if curves.empty:
        return "<p>no perturbation curves in the run</p>"
    out = []
    for k, ((run, model, task, metric, variant), sub) in enumerate(
            curves.groupby(["run", "model", "task", "metric", "variant"], sort=True)):
        table = table_metric_of(metric, str(variant))
        drawn = []
        for method, mdf in sub.groupby("method", sort=True):
            wide = wide_values(mdf, "step")
            mean, low, high = mean_band(wide.to_numpy(), confidence)
            label = str(method)
            if table is not None and not metrics.empty:
                hit = metrics[(metrics["run"].astype(str) == str(run)) & (metrics["model"] == model)
                              & (metrics["task"] == task) & (metrics["method"] == method)
                              & (metrics["metric"] == table[0]) & (metrics["variant"].astype(str) == table[1])]
                if len(hit) and np.isfinite(hit["value"].iloc[0]):
                    label += f" ({table[0]} {hit['value'].iloc[0]:.3f})"
            drawn.append(_Curve(str(method), wide.columns.to_numpy(dtype=np.float64), mean, low, high, label))
        xlabel, ylabel = curve_axes(metric, str(variant))
        title = (f"{model} / {task}: {metric} ({variant}), run {run}; band: "
                 f"{int(round(confidence * 100))}% CI of the mean")
        out.append(_curve_svg(drawn, title, xlabel, ylabel, f"curve-{k}"))
    return '<div class="curves">' + "\n".join(out) + "</div>"


# ----------------------------------------------------------------------------------------------------------------
# the sample explorer's data
# ----------------------------------------------------------------------------------------------------------------

def _needle_html(results: pd.DataFrame, which=None) -> str:
    """The needle grids as coloured tables (module docstring); empty for results without ``length`` and ``depth``."""
    parts = []
    for (run, model, task), metric, variant, grids in needle_grids_by_task(results, which):
        cmap, low, high = needle_scale(grids)
        tables = []
        for g in grids:
            head = "".join(f'<th scope="col">{_esc(length_label(n))}</th>' for n in g.lengths)
            body = []
            for i, depth in enumerate(g.depths):
                cells = []
                for j in range(len(g.lengths)):
                    v = g.values[i, j]
                    rgba = cmap((v - low) / (high - low)) if np.isfinite(v) else cmap.get_bad()
                    colour = "#%02x%02x%02x" % tuple(int(round(255 * c)) for c in rgba[:3])
                    cells.append(f'<td style="background:{colour};color:{ink_on(rgba)}" data-value='
                                 f'"{_number_attr(v)}">{_esc(bin_label(v))}<br><small>n={g.counts[i, j]}</small></td>')
                body.append(f'<tr><th scope="row">{100 * depth:g}%</th>{"".join(cells)}</tr>')
            tables.append(f'<table class="needle"><caption>{_esc(g.cell["method"])}</caption><thead><tr>'
                          f'<th scope="col">depth \\ length</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
                          "</table>")
        parts.append(f"<h3>{_esc(model)} / {_esc(task)}: {_esc(metric)} ({_esc(variant)})</h3>"
                     f'<p class="muted">run {_esc(run)}; each bin: the metric on its scored samples (n); grey: none'
                     f'</p><div class="needle-grids">{"".join(tables)}</div>')
    return "\n".join(parts)


def _natural_key(text: str):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(text))]


def _scalar(arrays: dict, name: str):
    if name not in arrays:
        return None
    value = np.asarray(arrays[name])
    return value.item() if value.ndim == 0 else None


def _token_views(arrays: dict) -> dict:
    """The three token views of one method: ``t`` its scores (total), ``s`` / ``p`` the aggregation's semantic and
    positional terms (``semantic_term`` / ``positional_term``; runs made before they were cached: ``semantic``,
    and a positional part only where the stored one is all zero, i.e. a method without one)."""
    total = np.asarray(arrays["scores"], dtype=np.float64).reshape(-1)
    n = len(arrays["tokens"]) if "tokens" in arrays else len(total)
    views = {"t": encode_scaled(total[:n])}
    if "semantic_term" in arrays:
        views["s"] = encode_scaled(np.asarray(arrays["semantic_term"])[:n])
    elif "semantic" in arrays and np.ndim(arrays["semantic"]) == 1:
        views["s"] = encode_scaled(np.asarray(arrays["semantic"])[:n])
    if "positional_term" in arrays:
        views["p"] = encode_scaled(np.asarray(arrays["positional_term"])[:n])
    elif "positional" in arrays and not np.any(np.asarray(arrays["positional"])):
        views["p"] = encode_scaled(np.zeros(n))
    return views


def _map_views(arrays: dict) -> dict:
    """The three map views of one method (int8 block means, :data:`MAP_CELLS`): ``t`` its pixel map, ``s`` the
    semantic pixel map, ``p`` the per-patch positional term."""
    views = {"t": encode_scaled(_block_mean(arrays["scores"]), bits=8)}
    if "semantic" in arrays and np.ndim(arrays["semantic"]) == 2:
        views["s"] = encode_scaled(_block_mean(arrays["semantic"]), bits=8)
    positional = arrays.get("positional_term", arrays.get("positional"))
    if positional is not None and np.ndim(positional) == 2:
        views["p"] = encode_scaled(_block_mean(positional), bits=8)
    return views


def _sample_detail(arrays_by_method: dict[str, dict]) -> dict | None:
    """The chosen-sample data of one sample (every method that cached it), or None when none did."""
    detail: dict = {"m": {}}
    for method, arrays in arrays_by_method.items():
        if arrays is None or "scores" not in arrays:
            continue
        info = {k: v for k, v in (("explained", _scalar(arrays, "explained")), ("logit", _scalar(arrays, "logit")))
                if v is not None}
        if np.ndim(arrays["scores"]) == 1:
            tokens = [str(t) for t in arrays["tokens"]] if "tokens" in arrays else \
                [str(i) for i in range(len(arrays["scores"]))]
            if "tokens" not in detail:
                detail["tokens"] = tokens
            elif detail["tokens"] != tokens:
                info["tokens"] = tokens
            views = _token_views(arrays)
        else:
            if "image" not in detail and "image" in arrays:
                detail["image"] = _image_uri(arrays["image"])
            views = _map_views(arrays)
        detail["m"][method] = {**views, **info}
    return detail if detail["m"] else None


def _explorer_data(run_dir: Path | None, run: str, model: str, task: str, cell: pd.DataFrame,
                   samples: list[MetricSamples], budget: list[float]) -> dict:
    """Everything the explorer of one (run, model, task) needs (module docstring): ``cell`` its tidy rows,
    ``samples`` its table metrics' per-sample components; ``budget`` the bytes left for embedded explanations
    (decreased in place)."""
    methods = sorted(cell["method"].unique())
    ids = sorted(cell["sample_id"].astype(str).unique(), key=_natural_key)
    index = {sid: i for i, sid in enumerate(ids)}
    n = len(ids)
    correct = np.full(n, np.nan)
    rows = cell[cell["metric"] == "correct"]
    for sid, value in zip(rows["sample_id"].astype(str), rows["value"]):
        if np.isnan(correct[index[sid]]):
            correct[index[sid]] = float(value)
    metrics: dict[str, dict[str, str]] = {}
    higher: dict[str, bool | None] = {}
    for s in samples:
        key = f"{s.metric}:{s.variant}"
        kept, _ = s.retained()
        values = np.full(n, np.nan)
        with np.errstate(all="ignore"):
            per = s.per_sample()
        for sid, v in zip(kept.astype(str), per):
            values[index[sid]] = v
        metrics.setdefault(key, {})[str(s.cell["method"])] = _float32(values)
        higher[key] = direction(s.metric, s.variant)
    curve_data: dict[str, dict] = {}
    curves = cell[cell["metric"].isin(curve_inputs())]
    for (metric, variant), sub in curves.groupby(["metric", "variant"], sort=True):
        steps = np.sort(sub["step"].dropna().unique())
        entry = {"steps": [float(x) for x in steps], "methods": {}}
        for method, mdf in sub.groupby("method", sort=True):
            wide = wide_values(mdf, "step").reindex(index=ids, columns=steps)
            entry["methods"][str(method)] = _float32(wide.to_numpy())
        curve_data[f"{metric}:{variant}"] = entry
    cell_dirs = {}
    if run_dir is not None:
        root = Path(run_dir) / "cells" / model / task
        cell_dirs = {m: root / m for m in methods if (root / m / "explanations").is_dir()}
    labels = [""] * n
    details: list = [None] * n
    status = "embedded" if cell_dirs else "not cached by the run (runner.cache_explanations=false)"
    for i, sid in enumerate(ids):
        if not cell_dirs:
            break
        arrays = {m: read_explanation(explanation_file(d, sid)) for m, d in cell_dirs.items()}
        label = next((_scalar(a, "label") for a in arrays.values() if a is not None and "label" in a), None)
        labels[i] = "" if label is None else str(label)
        if budget[0] <= 0:
            status = "partly embedded (the report's size limit: raise --html-max-mb / runner.html_max_mb)"
            continue
        detail = _sample_detail(arrays)
        if detail is not None:
            size = len(json.dumps(detail))
            budget[0] -= size
            details[i] = detail
    return {"run": run, "model": model, "task": task, "kind": _task_kind(cell_dirs), "methods": methods,
            "ids": ids, "labels": labels, "correct": _float32(correct), "metrics": metrics, "higher": higher,
            "curves": curve_data, "details": details, "status": status, "palette": PALETTE, "dashes": DASHES}


def _script_json(data) -> str:
    """JSON safe inside ``<script type="application/json">`` (no ``</`` can close the element)."""
    return json.dumps(data, separators=(",", ":"), allow_nan=False, default=_json_default).replace("</", "<\\/")


def _json_default(x):
    if isinstance(x, np.generic):
        return x.item()
    raise TypeError(f"not JSON: {type(x).__name__}")


def _clean(data):
    """NaN / inf -> None (JSON has no NaN), recursively."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _clean(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_clean(v) for v in data]
    return data


# ----------------------------------------------------------------------------------------------------------------
# the page
# ----------------------------------------------------------------------------------------------------------------

def _made_by(run_dirs: list[Path]) -> str:
    """``; palrp-bench <version>, git <commit>`` of the first run's manifest (empty without one)."""
    for run_dir in run_dirs:
        path = Path(run_dir) / MANIFEST_JSON
        if path.is_file():
            env = json.loads(path.read_text()).get("environment", {})
            version = env.get("versions", {}).get("palrp-bench")
            commit = (env.get("git") or {}).get("commit")
            return "".join([f"; palrp-bench {version}" if version else "",
                            f", git {str(commit)[:10]}" if commit else ""])
    return ""


def render_html(results: pd.DataFrame, metrics: pd.DataFrame, run_dirs: list[Path], confidence: float, *,
                paper: list[Table] = (), paired: list[Table] = (), note: str = "", max_mb: float = DEFAULT_MAX_MB,
                samples: list[MetricSamples] | None = None, title: str = "palrp-bench report",
                needle_metrics=None) -> str:
    """The page (module docstring) of tidy ``results``, their ``metrics.csv`` rows (published numbers attached),
    the run directories holding their cached explanations, and the report's paper-shaped and paired tables;
    ``samples``: :func:`~palrp_bench.metrics.table.metric_samples` of ``results`` when the caller has them;
    ``needle_metrics``: the needle grids' ``(metric, variant)`` (default :func:`.plots.needle_grid_metrics`)."""
    if samples is None:
        samples = metric_samples(results)
    by_cell: dict[tuple, list[MetricSamples]] = {}
    for s in samples:
        by_cell.setdefault((str(s.cell["run"]), str(s.cell["model"]), str(s.cell["task"])), []).append(s)
    by_name = {Path(d).name: Path(d) for d in run_dirs}
    left = max_mb * 1e6
    explorers, blocks = [], []
    if not results.empty:
        results = results.assign(variant=results["variant"].astype(str), sample_id=results["sample_id"].astype(str))
        groups = list(results.groupby(["run", "model", "task"], sort=True))
        for k, ((run, model, task), cell) in enumerate(groups):
            # each explorer may use an equal share of what is left, so one large cell cannot starve the others
            allowance = left / (len(groups) - k)
            budget = [allowance]
            data = _explorer_data(by_name.get(str(run)), str(run), str(model), str(task), cell,
                                  by_cell.get((str(run), str(model), str(task)), []), budget)
            left -= allowance - budget[0]
            blocks.append(f'<script type="application/json" id="explorer-data-{k}">{_script_json(_clean(data))}'
                          "</script>")
            explorers.append(
                f'<details class="explorer" data-index="{k}"{" open" if k == 0 else ""}><summary>'
                f"<h3>{_esc(model)} / {_esc(task)}</h3> <span class=\"muted\">run {_esc(run)}, "
                f"{len(data['ids'])} samples, {len(data['methods'])} methods; explanations {_esc(data['status'])}"
                f'</span></summary><div class="explorer-root" id="explorer-{k}"></div></details>')
    runs = ", ".join(sorted({str(r) for r in results["run"].unique()})) if not results.empty else ""
    made_by = _made_by(run_dirs)
    paper_html = "\n".join(_table_html(t) for t in paper) or "<p>no number of the paper's tables in the run</p>"
    paired_html = "\n".join(_table_html(t) for t in paired) or "<p>no method pairs on common samples</p>"
    needle_html = _needle_html(results, needle_metrics) if not results.empty else ""
    needle_section = (f'<section id="needle" aria-labelledby="needle-h"><h2 id="needle-h">Needle grids: input '
                      f"length x needle depth</h2>\n{needle_html}\n</section>") if needle_html else ""
    css = (ASSETS / "report.css").read_text()
    js = (ASSETS / "report.js").read_text()
    colours = _script_json({"lut": colour_table(), "palette": PALETTE, "dashes": DASHES})
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_esc(title)}{' - ' + _esc(runs) if runs else ''}</title>
<style>{css}</style>
</head>
<body>
<a class="skip" href="#explorers">skip to the sample explorer</a>
<header><h1>{_esc(title)}</h1><p class="muted">run {_esc(runs)}{_esc(made_by)}</p>
<nav aria-label="sections"><a href="#tables">tables</a> <a href="#curves">curves</a>
{'<a href="#needle">needle grids</a> ' if needle_section else ''}<a href="#explorers">sample explorer</a></nav></header>
<main>
<section id="tables" aria-labelledby="tables-h"><h2 id="tables-h">Table numbers (metrics.csv)</h2>
<p class="note">{_esc(note)}</p>
{_cell_tables_html(metrics, confidence)}
<h2>The paper's tables: published vs reproduced</h2>
{paper_html}
<h2>Paired comparisons (same samples)</h2>
{paired_html}
</section>
<section id="curves" aria-labelledby="curves-h"><h2 id="curves-h">Perturbation curves</h2>
{_curves_html(results, metrics, confidence) if not results.empty else '<p>no results</p>'}
</section>
{needle_section}
<section id="explorers" aria-labelledby="explorers-h"><h2 id="explorers-h">Sample explorer</h2>
<p class="note">Pick a sample in a list (click, or the arrow keys and Enter); sort by a column header, filter above
the list. Relevance colours: red positive, blue negative, white 0, each method's array divided by its own largest
|value| (the perturbation protocols depend only on the order). <em>total</em> is the method's score (what the
protocols rank), <em>semantic</em> and <em>positional</em> the two terms its aggregation combines.</p>
{''.join(explorers) or '<p>no samples</p>'}
</section>
</main>
<div id="tooltip" role="tooltip" hidden></div>
<script type="application/json" id="report-colours">{colours}</script>
{''.join(blocks)}
<script>{js}</script>
</body>
</html>
"""


def write_html(path: Path, results: pd.DataFrame, metrics: pd.DataFrame, run_dirs: list[Path], confidence: float,
               **kwargs) -> Path:
    """Write :func:`render_html` to ``path`` (temporary name, then renamed: a reader never sees half a page)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(render_html(results, metrics, run_dirs, confidence, **kwargs), encoding="utf-8")
    tmp.replace(path)
    return path
