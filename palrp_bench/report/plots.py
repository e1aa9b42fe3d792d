"""Figures of a report (matplotlib, Agg backend): perturbation curves and relevance-map galleries.

* :func:`curve_figure` / :func:`plot_curves`: per (run, model, task, curve, variant) the sample-mean curve of every
  method with a band (the pointwise confidence interval of the mean over samples, Student t, at the report's
  confidence), each method in its own colour (line and band, the same in every plot of a report), line style and
  marker so equal curves stay visible, and the method's table number from ``metrics.csv`` in the legend (the area
  whose curve it is: AUAC, AU-MSE, vision AUC); the x axis says whether the fraction counts tokens kept or removed
  (pixels: most or least relevant removed first), the y axis what is measured.
* :func:`gallery_figure` / :func:`plot_gallery`: per (run, model, task) a grid of fixed sample ids (rows) x methods
  (columns) from the explanation cache the runner saved (``cells/<model>/<task>/<method>/explanations``).
  Each map is shown as the evaluation uses it, divided by its largest absolute value (perturbation order and the
  mean threshold do not depend on the scale), and every method of a sample shares one colour scale and one colour
  bar. Non-negative maps (the ReLU'd vision maps) use a sequential colour map whose zero is fully transparent, so
  the image shows through where there is no relevance; signed maps use a diverging map centred at zero
  (``matplotlib.colors.CenteredNorm``) whose centre is transparent over images and white behind tokens.
  The gallery shows what its task evaluates: segmentation galleries outline the mean-threshold foreground that
  Table 5 scores (and the ground-truth mask when cached); image-classification galleries show the map of the
  explained class; text galleries colour each token's background.
* :func:`needle_grids` / :func:`plot_needle_grids`: for results that carry ``length`` and ``depth`` (the needle in a
  haystack), per (run, model, task) and table metric of :func:`needle_grid_metrics` the length x depth picture, one
  panel per method, each bin the metric's own function on its samples.
"""
from __future__ import annotations

import json
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.registry import EACH_VARIANT, curve_inputs, metric_specs
from ..metrics.table import metric_samples
from ..rundir import explanation_file, read_explanation

#: line styles and markers cycled over the methods of a curve plot (distinct even when curves coincide)
LINE_STYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X")
#: what the axes of each raw curve show: the y label, and per variant what the x fraction counts (docs/protocol.md
#: sections 2 and 3: generation puts the most relevant tokens back into an all-UNK input, pruning replaces the least
#: relevant ones by UNK; positive perturbation removes the most relevant pixels first, negative the least relevant)
CURVE_AXES = {
    "ac": ("AC: probability of the tracked output",
           {"generation": "fraction of tokens kept (most relevant first, the rest UNK)",
            "pruning": "fraction of tokens removed (least relevant first, replaced by UNK)"}),
    "mse": ("MSE: squared change of the tracked logit",
            {"generation": "fraction of tokens kept (most relevant first, the rest UNK)",
             "pruning": "fraction of tokens removed (least relevant first, replaced by UNK)"}),
    "agreement": ("agreement with the original prediction (share of images)",
                  {"positive": "fraction of pixels removed (most relevant first)",
                   "negative": "fraction of pixels removed (least relevant first)"}),
    "accuracy": ("top-1 accuracy on the ground-truth class (share of images)",
                 {"positive": "fraction of pixels removed (most relevant first)",
                  "negative": "fraction of pixels removed (least relevant first)"}),
}


def curve_axes(curve: str, variant: str) -> tuple[str, str]:
    """``(x label, y label)`` of a raw curve and variant (:data:`CURVE_AXES`; an unknown curve: its name)."""
    y, xs = CURVE_AXES.get(curve, (curve, {}))
    return xs.get(variant, f"fraction perturbed ({variant})"), y


def method_colours(methods) -> dict[str, tuple]:
    """One colour per method, distinct for up to 20 (``tab10``, then ``tab20``; more: evenly spaced on
    ``gist_rainbow``), assigned in sorted order so that a method has the same colour in every plot of a report."""
    plt = _mpl()
    methods = sorted(dict.fromkeys(str(m) for m in methods))
    n = len(methods)
    if n <= 10:
        colours = plt.get_cmap("tab10").colors
    elif n <= 20:
        colours = plt.get_cmap("tab20").colors
    else:
        colours = [plt.get_cmap("gist_rainbow")(i / n) for i in range(n)]
    return {m: tuple(colours[i]) for i, m in enumerate(methods)}
SEQUENTIAL_CMAP = "inferno_r"
DIVERGING_CMAP = "RdBu_r"


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(str(p) for p in parts))


# ----------------------------------------------------------------------------------------------------------------
# curves
# ----------------------------------------------------------------------------------------------------------------

def table_metric_of(curve: str, variant: str) -> tuple[str, str] | None:
    """The ``(table metric, variant)`` whose number is the area under the raw ``curve`` rows of ``variant``."""
    for spec in metric_specs().values():
        if not spec.curve:
            continue
        for source in spec.sources:
            if source.inputs[0] == curve and source.raw_variant in (None, variant):
                return spec.name, variant if source.variant == EACH_VARIANT else source.variant
    return None


def mean_band(curves: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise mean of ``curves [n, steps]`` over samples and its Student-t confidence interval
    (``scipy.stats.t.interval`` with ``scipy.stats.sem``; NaN steps are left out per step, as the official
    ``nanmean`` does), clipped to the range of the samples. With fewer than two samples the band collapses onto
    the mean."""
    from scipy import stats

    curves = np.asarray(curves, dtype=np.float64)
    n = np.isfinite(curves).sum(axis=0)
    with np.errstate(invalid="ignore"):
        mean = np.nanmean(curves, axis=0) if curves.size else np.zeros(curves.shape[1])
        sem = stats.sem(curves, axis=0, nan_policy="omit") if curves.shape[0] > 1 else np.zeros_like(mean)
        sem = np.where((n > 1) & np.isfinite(sem), sem, 0.0)
        low, high = stats.t.interval(confidence, np.maximum(n - 1, 1), loc=mean, scale=np.where(sem > 0, sem, 1.0))
    low, high = np.where(sem > 0, low, mean), np.where(sem > 0, high, mean)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN steps
        # the mean of the samples cannot leave their range (an AC curve stays in [0, 1])
        low, high = np.maximum(low, np.nanmin(curves, axis=0)), np.minimum(high, np.nanmax(curves, axis=0))
    return mean, low, high


def curve_figure(curves: pd.DataFrame, numbers: pd.DataFrame | None, title: str, confidence: float = 0.95,
                 colours: dict | None = None):
    """The figure of one curve: ``curves`` are the tidy rows of one (run, model, task, metric, variant);
    ``numbers`` the matching ``metrics.csv`` rows (for the legend); ``colours``: method -> colour of its line and
    band (default :func:`method_colours` of the plotted methods). The axes say what is plotted
    (:func:`curve_axes`)."""
    plt = _mpl()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    curve, variant = curves["metric"].iloc[0], str(curves["variant"].iloc[0])
    table = table_metric_of(curve, variant)
    colours = colours or method_colours(curves["method"].unique())
    for k, (method, mdf) in enumerate(curves.groupby("method", sort=True)):
        wide = mdf.pivot_table(index="sample_id", columns="step", values="value", aggfunc="first", dropna=False)
        steps = wide.columns.to_numpy(dtype=np.float64)
        mean, low, high = mean_band(wide.to_numpy(), confidence)
        label = str(method)
        if table is not None and numbers is not None and not numbers.empty:
            hit = numbers[(numbers["method"] == method) & (numbers["metric"] == table[0])
                          & (numbers["variant"].astype(str) == table[1])]
            if len(hit) and np.isfinite(hit["value"].iloc[0]):
                label += f" ({table[0]} {hit['value'].iloc[0]:.3f})"
        colour = colours[str(method)]
        ax.plot(steps, mean, linestyle=LINE_STYLES[k % len(LINE_STYLES)], marker=MARKERS[k % len(MARKERS)],
                ms=3.5, lw=1.4, label=label, alpha=0.9, color=colour)
        ax.fill_between(steps, low, high, color=colour, alpha=0.15, linewidth=0)
    xlabel, ylabel = curve_axes(curve, variant)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.set_title(title, fontsize=8)
    ax.legend(fontsize=7, title=f"band: {int(round(confidence * 100))}% CI of the mean", title_fontsize=7)
    fig.tight_layout()
    return fig


def plot_curves(df: pd.DataFrame, metrics: pd.DataFrame | None, out_dir: Path, confidence: float = 0.95
                ) -> list[Path]:
    """Write one curve plot per (run, model, task, curve, variant); returns the paths."""
    plt = _mpl()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    curves = df[df["metric"].isin(curve_inputs())]
    colours = method_colours(curves["method"].unique())  # one colour per method across the report's plots
    for (run, model, task, metric, variant), sub in curves.groupby(["run", "model", "task", "metric", "variant"]):
        numbers = None
        if metrics is not None and not metrics.empty:
            numbers = metrics[(metrics["run"].astype(str) == str(run)) & (metrics["model"] == model)
                              & (metrics["task"] == task)]
        fig = curve_figure(sub, numbers, f"{model} / {task}: {metric} ({variant})", confidence, colours)
        path = out_dir / f"curves_{_slug(run, model, task, metric, variant)}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


# ----------------------------------------------------------------------------------------------------------------
# relevance maps
# ----------------------------------------------------------------------------------------------------------------

def _transparent_zero(name: str, diverging: bool):
    """``name`` with an alpha channel that is 0 at relevance 0 and grows with |relevance| (a diverging map's centre,
    a sequential map's low end), so zero relevance never paints over the image."""
    from matplotlib.colors import ListedColormap

    plt = _mpl()
    n = 257  # odd: a diverging map has an entry exactly at its centre
    colours = plt.get_cmap(name)(np.linspace(0, 1, n))
    ramp = np.abs(np.linspace(-1, 1, n)) if diverging else np.linspace(0, 1, n)
    colours[:, 3] = np.clip(ramp * 1.6, 0, 0.9)
    return ListedColormap(colours, name=f"{name}_zero_transparent")


def map_style(maps: list[np.ndarray], over_image: bool):
    """``(cmap, norm)`` shared by all maps of one sample (already divided by their max |value|): sequential from 0
    to 1 when every map is non-negative, diverging and centred at 0 otherwise."""
    from matplotlib.colors import CenteredNorm, Normalize

    plt = _mpl()
    signed = any(np.nanmin(m) < 0 for m in maps if np.size(m))
    if signed:
        cmap = _transparent_zero(DIVERGING_CMAP, True) if over_image else plt.get_cmap(DIVERGING_CMAP)
        return cmap, CenteredNorm(vcenter=0.0, halfrange=1.0)
    cmap = _transparent_zero(SEQUENTIAL_CMAP, False) if over_image else plt.get_cmap(SEQUENTIAL_CMAP)
    return cmap, Normalize(vmin=0.0, vmax=1.0)


def normalise(x: np.ndarray) -> np.ndarray:
    """``x / max|x|`` (zero maps stay zero; non-finite values become 0)."""
    x = np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0, posinf=0.0, neginf=0.0)
    m = np.abs(x).max() if x.size else 0.0
    return x / m if m > 0 else x


def _draw_tokens(ax, tokens: np.ndarray, scores: np.ndarray, cmap, norm) -> None:
    """Tokens left to right, wrapped at the axes' width, each on a background coloured by its (normalised) score.
    Widths are measured with the renderer, positions are offsets in points from the axes' top-left corner, so
    tokens never overlap whatever the figure size (call after the figure's layout is final)."""
    from matplotlib.transforms import offset_copy

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    points = 72.0 / fig.dpi
    box = ax.get_window_extent(renderer)
    width, height, line = box.width * points, box.height * points, 9.0
    ax.axis("off")
    x = y = 0.0
    for tok, v in zip(tokens, scores):
        text = str(tok).replace("\n", "\\n") or " "
        r, g, b, _ = cmap(norm(v))
        ink = "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"  # readable on dark backgrounds
        t = ax.text(0, 1, text, fontsize=6, va="top", ha="left", family="monospace", color=ink,
                    transform=offset_copy(ax.transAxes, fig, x=x, y=-y, units="points"),
                    bbox=dict(facecolor=(r, g, b), edgecolor="none", pad=0.6))
        w = t.get_window_extent(renderer).width * points + 2.5
        if x + w > width and x > 0:
            x, y = 0.0, y + line
            t.set_transform(offset_copy(ax.transAxes, fig, x=x, y=-y, units="points"))
        if y + line > height:
            t.set_text("...")
            break
        x += w


def _as_hwc(image: np.ndarray) -> np.ndarray:
    img = np.asarray(image)
    if img.ndim == 3 and img.shape[0] in (1, 3):
        img = np.transpose(img, (1, 2, 0))
    img = img.astype(np.float64)
    return img / 255.0 if img.max() > 1.0 else img


def _draw_map(ax, image, scores: np.ndarray, cmap, norm, kind: str, mask=None):
    """The map over a desaturated copy of the image; segmentation adds the mean-threshold foreground (solid) and the
    ground-truth mask (dashed) outlines."""
    if image is not None:
        gray = _as_hwc(image)
        gray = gray.mean(axis=-1) if gray.ndim == 3 else gray
        ax.imshow(gray, cmap="gray", vmin=0, vmax=1, alpha=0.55)
    im = ax.imshow(scores, cmap=cmap, norm=norm, interpolation="nearest")
    if kind == "image_segmentation":
        ax.contour(scores > scores.mean(), levels=[0.5], colors="cyan", linewidths=0.8)
        if mask is not None:
            ax.contour(np.asarray(mask).squeeze(), levels=[0.5], colors="lime", linewidths=0.8, linestyles="--")
    ax.set_xticks([])
    ax.set_yticks([])
    return im


def gallery_ids(cell_dirs: dict[str, Path], wanted: list[str] | None, k: int = 4) -> list[str]:
    """The sample ids of a gallery: those of ``wanted`` that some method cached (if given), else the first ``k``
    ids cached by every method."""
    if wanted:
        return [sid for sid in wanted if any(explanation_file(c, sid).exists() for c in cell_dirs.values())]
    common = None
    for cdir in cell_dirs.values():
        ids = set()
        for path in (cdir / "explanations").glob("*.npz"):
            with np.load(path, allow_pickle=False) as data:
                ids.add(str(data["sample_id"]))
        common = ids if common is None else common & ids
    return sorted(common or [])[:k]


def _task_kind(cell_dirs: dict[str, Path]) -> str:
    for cdir in cell_dirs.values():
        path = cdir / "cell.json"
        if path.is_file():
            return str(json.loads(path.read_text()).get("settings", {}).get("task", {}).get("kind", ""))
    return ""


_KIND_CAPTION = {
    "image_segmentation": "cyan: foreground = map > mean (what Table 5 scores); dashed green: ground-truth mask",
    "image_classification": "map of the predicted class (what the Table 4 'predicted' curves perturb)",
}


def gallery_figure(cell_dirs: dict[str, Path], ids: list[str], title: str, kind: str = ""):
    """The gallery figure: rows = ``ids``, columns = the input image (when cached) and the methods of
    ``cell_dirs``, then the row's colour bar."""
    from matplotlib.cm import ScalarMappable

    plt = _mpl()
    methods = list(cell_dirs)
    rows = [{m: read_explanation(explanation_file(cell_dirs[m], sid)) for m in methods} for sid in ids]
    inputs = [next((a["image"] for a in r.values() if a is not None and a.get("image") is not None), None)
              for r in rows]
    lead = 1 if any(img is not None for img in inputs) else 0
    row_height = 1.3 if kind in ("text_classification", "next_token") else 2.4
    n_cols = lead + len(methods) + 1
    fig, axes = plt.subplots(len(ids), n_cols, squeeze=False,
                             figsize=(2.6 * (n_cols - 1) + 0.6, row_height * len(ids) + 0.5),
                             gridspec_kw={"width_ratios": [1.0] * (n_cols - 1) + [0.06]})
    token_rows = []  # drawn once the layout is final (their widths are measured in points)
    for i, (sid, arrays) in enumerate(zip(ids, rows)):
        scores = {m: normalise(a["scores"]) for m, a in arrays.items() if a is not None and "scores" in a}
        sequence = any(np.ndim(s) == 1 for s in scores.values())
        cmap, norm = map_style(list(scores.values()), over_image=inputs[i] is not None and not sequence)
        if lead:
            ax = axes[i][0]
            if inputs[i] is not None:
                ax.imshow(_as_hwc(inputs[i]), interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_title("input", fontsize=8)
        for j, method in enumerate(methods):
            ax = axes[i][lead + j]
            if method not in scores:
                ax.text(0.5, 0.5, "not cached", ha="center", fontsize=7)
                ax.axis("off")
            elif np.ndim(scores[method]) == 1:  # a sequence: token heatmap (positions when no token strings)
                tokens = arrays[method].get("tokens", np.arange(len(scores[method])).astype(str))
                ax.axis("off")
                token_rows.append((ax, tokens, scores[method], cmap, norm))
            else:
                _draw_map(ax, arrays[method].get("image"), scores[method], cmap, norm, kind,
                          arrays[method].get("mask"))
            if i == 0:
                ax.set_title(method, fontsize=8)
        axes[i][0].text(-0.04, 0.5, sid, transform=axes[i][0].transAxes, rotation=90, ha="right", va="center",
                        fontsize=6)
        axes[i][-1].set_label("<colorbar>")
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), cax=axes[i][-1])
        bar.set_label("relevance / max |relevance|", fontsize=6)
        bar.ax.tick_params(labelsize=6)
    caption = _KIND_CAPTION.get(kind, "")
    fig.suptitle(title + (f"\n{caption}" if caption else ""), fontsize=8)
    fig.tight_layout()
    for args in token_rows:
        _draw_tokens(*args)
    return fig


def plot_gallery(run_dir: Path, model: str, task: str, out_dir: Path, wanted: list[str] | None = None) -> Path | None:
    """Write the gallery of one (model, task) of a run; None if nothing is cached."""
    plt = _mpl()
    cell_root = Path(run_dir) / "cells" / model / task
    cell_dirs = {p.name: p for p in sorted(cell_root.iterdir()) if (p / "explanations").is_dir()} \
        if cell_root.is_dir() else {}
    if not cell_dirs:
        return None
    ids = gallery_ids(cell_dirs, wanted)
    if not ids:
        return None
    fig = gallery_figure(cell_dirs, ids, f"{model} / {task}", _task_kind(cell_dirs))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"gallery_{_slug(Path(run_dir).name, model, task)}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


__all__ = ["plot_curves", "curve_figure", "plot_gallery", "gallery_figure", "gallery_ids", "mean_band", "map_style",
           "normalise", "table_metric_of"]


# ----------------------------------------------------------------------------------------------------------------
# the needle grid
# ----------------------------------------------------------------------------------------------------------------

#: the ``(table metric, variant)`` grids a report draws for every cell whose results carry ``length`` and ``depth``
#: (the needle in a haystack, docs/evidence.md): a metric of the value (``report.needle_metric``, default the
#: relevance mass on it) and the positional share of the relevance
NEEDLE_METRIC = "rma:default"
POSITIONAL_SHARE_GRID = ("positional_share_percent", "all")


def needle_grid_metrics(metric: str = NEEDLE_METRIC) -> tuple[tuple[str, str], ...]:
    """The grids of a report: ``metric`` (``<table metric>:<variant>``, a one-line error otherwise) and the
    positional share."""
    from ..errors import BadInputError

    name, _, variant = str(metric).partition(":")
    if name not in metric_specs() or not variant:
        raise BadInputError(f"needle grid metric {metric!r} is not <table metric>:<variant>",
                            f"use e.g. {NEEDLE_METRIC} or pg:key (metrics: {', '.join(sorted(metric_specs()))})")
    return tuple(dict.fromkeys(((name, variant), POSITIONAL_SHARE_GRID)))


@dataclass
class NeedleGrid:
    """One table metric of one cell per (depth, length) bin: ``values`` / ``counts`` ``[len(depths), len(lengths)]``
    (the metric's own function on the bin's samples, :meth:`~palrp_bench.metrics.table.MetricSamples.subset`; NaN
    and 0 where the bin has no scored sample, e.g. no needle retrieved)."""

    cell: dict
    metric: str
    variant: str
    higher_is_better: bool | None
    unit: str
    lengths: list[int]
    depths: list[float]
    values: np.ndarray
    counts: np.ndarray


def needle_grids(results: pd.DataFrame, metric: str, variant: str) -> list[NeedleGrid]:
    """The length x depth grids of ``metric`` / ``variant`` (:class:`NeedleGrid`), one per cell whose rows carry
    ``length`` and ``depth`` (none for other results); the bins are the lengths and depths the samples of the cell's
    (run, model, task) have under any method (a length at which no needle was retrieved has no scored sample and so
    no column)."""
    if not {"length", "depth"} <= set(results.columns):
        return []
    described = results.dropna(subset=["length", "depth"])
    if described.empty:
        return []
    where = described.groupby("sample_id")[["length", "depth"]].first()  # the ids encode both: one value each
    grids = []
    for s in metric_samples(described):
        if s.metric != metric or s.variant != variant:
            continue
        rows = described[(described["run"].astype(str) == s.cell["run"]) & (described["model"] == s.cell["model"])
                         & (described["task"] == s.cell["task"])]
        lengths = sorted(int(x) for x in rows["length"].unique())
        depths = sorted(float(x) for x in rows["depth"].unique())
        values = np.full((len(depths), len(lengths)), np.nan)
        counts = np.zeros((len(depths), len(lengths)), dtype=int)
        ids, _ = s.retained()
        bins = where.loc[ids]
        for (length, depth), members in bins.groupby(["length", "depth"]).groups.items():
            part = s.subset(members)
            i, j = depths.index(float(depth)), lengths.index(int(length))
            values[i, j], counts[i, j] = part.value(), part.n
        better = s.spec.higher_is_better
        better = better.get(variant) if isinstance(better, dict) else better
        grids.append(NeedleGrid(s.cell, metric, variant, better, s.spec.unit, lengths, depths, values, counts))
    return grids


def length_label(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def needle_scale(grids: list[NeedleGrid]):
    """``(colour map, low, high)`` of one needle picture (:func:`needle_figure`; the HTML report colours its grid
    tables the same way): 0-100 for a score in percent that stays in it, else the range of the panels' values; red
    to green where higher is better, else viridis; grey for a bin without a value."""
    plt = _mpl()
    finite = np.concatenate([g.values[np.isfinite(g.values)] for g in grids] + [np.zeros(0)])
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if grids[0].higher_is_better is not None and grids[0].unit == "%" and 0.0 <= low and high <= 100.0:
        low, high = 0.0, 100.0
    if high == low:
        low, high = low - 1.0, high + 1.0
    cmap = plt.get_cmap("RdYlGn" if grids[0].higher_is_better else "viridis").with_extremes(bad="#d9d9d9")
    return cmap, low, high


def ink_on(rgba) -> str:
    """``white`` or ``black``: the text colour readable on the background ``rgba``."""
    r, g, b = rgba[:3]
    return "white" if 0.299 * r + 0.587 * g + 0.114 * b < 0.5 else "black"


def bin_label(value: float) -> str:
    """A bin's value as the needle pictures print it (``-``: none)."""
    return "-" if not np.isfinite(value) else f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}"


def needle_figure(grids: list[NeedleGrid], title: str):
    """The needle-in-a-haystack picture of one (run, model, task, metric): one panel per method, lengths across,
    depths down (0 % at the top: the needle first), each bin coloured by its value (one colour scale for every
    panel: 0-100 for a score in percent that stays in it, else the values' range; red to green where higher is
    better) and labelled with it and, below, its number of scored samples; a bin without one is grey and marked
    "-"."""
    plt = _mpl()
    n = len(grids)
    width = max(len(g.lengths) for g in grids)
    fig, axes = plt.subplots(1, n, figsize=(1.2 + n * (1.0 + 0.65 * width), 4.2), squeeze=False)
    cmap, low, high = needle_scale(grids)
    image = None
    for ax, g in zip(axes[0], grids):
        image = ax.imshow(np.ma.masked_invalid(g.values), cmap=cmap, vmin=low, vmax=high, aspect="auto")
        for i in range(len(g.depths)):
            for j in range(len(g.lengths)):
                v = g.values[i, j]
                ink = ink_on(cmap(image.norm(v))) if np.isfinite(v) else "black"
                ax.text(j, i, f"{bin_label(v)}\n(n={g.counts[i, j]})", ha="center", va="center", fontsize=6,
                        color=ink)
        ax.set_xticks(range(len(g.lengths)), [length_label(x) for x in g.lengths], fontsize=7)
        ax.set_yticks(range(len(g.depths)), [f"{100 * d:g}%" for d in g.depths], fontsize=7)
        ax.set_xlabel("input length (tokens)", fontsize=8)
        ax.set_title(str(g.cell["method"]), fontsize=8)
    axes[0][0].set_ylabel("needle depth (0% = first)", fontsize=8)
    g = grids[0]
    bar = fig.colorbar(image, ax=list(axes[0]), fraction=0.03)
    bar.set_label(f"{g.metric}:{g.variant}", fontsize=8)
    fig.suptitle(title, fontsize=8)
    return fig


def needle_grids_by_task(df: pd.DataFrame, which=None) -> list[tuple[tuple, str, str, list[NeedleGrid]]]:
    """``((run, model, task), metric, variant, grids of its methods)`` for every grid of ``which`` (default
    :func:`needle_grid_metrics`) the results have, methods sorted by name."""
    which = needle_grid_metrics() if which is None else which
    out = []
    for metric, variant in which:
        by_task: dict[tuple, list[NeedleGrid]] = {}
        for g in needle_grids(df, metric, variant):
            by_task.setdefault((g.cell["run"], g.cell["model"], g.cell["task"]), []).append(g)
        for key, grids in sorted(by_task.items()):
            out.append((key, metric, variant, sorted(grids, key=lambda g: str(g.cell["method"]))))
    return out


def plot_needle_grids(df: pd.DataFrame, out_dir: Path, which=None) -> list[Path]:
    """Write one needle picture (:func:`needle_figure`) per (run, model, task) and ``(metric, variant)`` of
    ``which`` (default :func:`needle_grid_metrics`) that the results have; returns the paths (none for results without
    ``length`` and ``depth``)."""
    plt = _mpl()
    out_dir = Path(out_dir)
    paths = []
    for (run, model, task), metric, variant, grids in needle_grids_by_task(df, which):
        fig = needle_figure(grids, f"{model} / {task}: {metric} ({variant}) by input length and needle depth")
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / f"needle_{_slug(run, model, task, metric, variant)}.png"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths
