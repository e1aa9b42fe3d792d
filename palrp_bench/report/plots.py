"""Figures of a report (matplotlib, Agg backend): perturbation curves and heatmap galleries.

* :func:`plot_curves`: per (run, model, task, curve metric, variant) one PNG with the sample-mean curve of every
  method (the curves whose areas are Tables 1-4).
* :func:`plot_gallery`: per (run, model, task) one PNG, a grid of fixed sample ids (rows) x methods (columns)
  drawn from the explanation cache the runner saved (``cells/<model>/<task>/<method>/explanations``): token
  heatmaps for text (each token's background coloured by its normalised score), pixel maps over the image for
  vision. The ids are ``report.gallery_ids`` when given, otherwise the first few ids every method has cached.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from ..metrics.registry import curve_inputs
from ..rundir import explanation_file, read_explanation


def _mpl():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _slug(*parts) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "_".join(str(p) for p in parts))


def plot_curves(df: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Write one curve plot per (run, model, task, metric, variant); returns the paths."""
    plt = _mpl()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    curves = df[df["metric"].isin(curve_inputs())]
    for (run, model, task, metric, variant), sub in curves.groupby(["run", "model", "task", "metric", "variant"]):
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for method, mdf in sub.groupby("method", sort=True):
            mean = mdf.groupby("step")["value"].mean()
            ax.plot(mean.index, mean.values, marker="o", ms=3, label=method)
        ax.set_xlabel("fraction" if metric in ("ac", "mse") else "fraction of pixels removed")
        ax.set_ylabel(metric)
        ax.set_title(f"{model} / {task}: {metric} ({variant})", fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"curves_{_slug(run, model, task, metric, variant)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def _normalise(x: np.ndarray) -> np.ndarray:
    x = np.nan_to_num(np.asarray(x, dtype=np.float64))
    m = np.abs(x).max()
    return x / m if m > 0 else x


def _draw_tokens(ax, tokens: np.ndarray, scores: np.ndarray, plt) -> None:
    """Tokens left to right, wrapped, each on a red (positive) / blue (negative) background."""
    cmap = plt.get_cmap("bwr")
    s = _normalise(scores)
    x, y, line_height, width = 0.0, 1.0, 0.12, 1.0
    for tok, v in zip(tokens, s):
        text = str(tok).replace("\n", "\\n") or " "
        w = 0.018 * (len(text) + 1)
        if x + w > width and x > 0:
            x, y = 0.0, y - line_height
        if y < 0:
            ax.text(x, y + line_height / 2, "...", fontsize=6)
            break
        ax.text(x, y, text, fontsize=6, va="top", family="monospace",
                bbox=dict(facecolor=cmap(0.5 + 0.5 * v), edgecolor="none", pad=0.5))
        x += w
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.05)
    ax.axis("off")


def _draw_map(ax, image: np.ndarray | None, scores: np.ndarray) -> None:
    if image is not None:
        img = np.asarray(image)
        if img.ndim == 3 and img.shape[0] in (1, 3):
            img = np.transpose(img, (1, 2, 0))
        ax.imshow(img.squeeze())
        ax.imshow(_normalise(scores), cmap="jet", alpha=0.5, vmin=-1, vmax=1)
    else:
        ax.imshow(_normalise(scores), cmap="bwr", vmin=-1, vmax=1)
    ax.axis("off")


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


def plot_gallery(run_dir: Path, model: str, task: str, out_dir: Path, wanted: list[str] | None = None) -> Path | None:
    """Grid of cached explanations (sample ids x methods) of one (model, task) of a run; None if none cached."""
    plt = _mpl()
    cell_root = Path(run_dir) / "cells" / model / task
    cell_dirs = {p.name: p for p in sorted(cell_root.iterdir()) if (p / "explanations").is_dir()} \
        if cell_root.is_dir() else {}
    if not cell_dirs:
        return None
    ids = gallery_ids(cell_dirs, wanted)
    if not ids:
        return None
    methods = list(cell_dirs)
    fig, axes = plt.subplots(len(ids), len(methods), figsize=(3.0 * len(methods), 2.4 * len(ids)), squeeze=False)
    for i, sid in enumerate(ids):
        for j, method in enumerate(methods):
            ax = axes[i][j]
            arrays = read_explanation(explanation_file(cell_dirs[method], sid))
            if arrays is None or "scores" not in arrays:
                ax.text(0.5, 0.5, "not cached", ha="center", fontsize=7)
                ax.axis("off")
            elif np.ndim(arrays["scores"]) == 1:  # a sequence: token heatmap (positions when no token strings)
                tokens = arrays.get("tokens", np.arange(len(arrays["scores"])).astype(str))
                _draw_tokens(ax, tokens, arrays["scores"], plt)
            else:
                _draw_map(ax, arrays.get("image"), arrays["scores"])
            if i == 0:
                ax.set_title(method, fontsize=8)
            if j == 0:
                ax.text(-0.02, 0.5, sid, transform=ax.transAxes, rotation=90, ha="right", va="center", fontsize=6)
    fig.tight_layout()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"gallery_{_slug(Path(run_dir).name, model, task)}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
