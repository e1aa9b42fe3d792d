"""Published vs reproduced, side by side, as data frames and as Markdown / LaTeX (issue "Reports").

:func:`comparison_frame` joins the reproduced table numbers (a run's ``metrics.csv``) with the
published numbers on (model, task, method, variant, metric); a reproduced task is compared with its
``paper_task`` (e.g. ``mcqa_noncausal`` with ``mcqa``). Rows of a paper table that were not reproduced are kept
(reproduced = NaN) so a partial run shows what is missing; reproduced numbers without a published counterpart
(embedded tiny models, mAP, ...) form the ``reproduced only`` section. :func:`paired_frame` compares methods on
the same samples (:mod:`palrp_bench.report.stats`) from the per-sample rows.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..metrics.table import MetricSamples
from .stats import paired_comparison

#: ``(a, b)`` method pairs compared per sample: PA-LRP vs AttnLRP (every table), PA-LRP vs its ablation (Table 2)
PAIRS = (("pa_lrp", "attnlrp"), ("pa_lrp", "pa_lrp_no_multisink"), ("pe_only", "attnlrp"))
REPRODUCED_ONLY = "reproduced only"


def direction(metric: str, variant: str, published_hib=None) -> bool | None:
    """higher-is-better of a metric/variant: the published CSV's, else the metric registry's, else None."""
    if isinstance(published_hib, (bool, np.bool_)):
        return bool(published_hib)
    from ..metrics.registry import metric_specs

    spec = metric_specs().get(metric)
    if spec is None:
        return None
    hib = spec.higher_is_better
    return hib.get(variant) if hasattr(hib, "get") else hib


def reproduced_frame(metrics: pd.DataFrame) -> pd.DataFrame:
    """The rows of a ``metrics.csv`` frame with the table number named ``reproduced``."""
    return metrics.rename(columns={"value": "reproduced"})


def comparison_frame(reproduced: pd.DataFrame, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (table, reproduced cell, metric, variant) and per unreproduced published number."""
    key = ["model", "task", "method", "variant", "metric"]
    out = []
    rep = reproduced.copy()
    if not rep.empty:
        rep["paper_task"] = rep["paper_task"].where(rep["paper_task"].astype(str) != "", rep["task"])
        rep = rep.rename(columns={"task": "run_task"}).rename(columns={"paper_task": "task"})
    matched = set()
    for table, pub in published.groupby("table", sort=True):
        if rep.empty:
            continue
        joined = pub.merge(rep, on=key, how="left", suffixes=("", "_rep"))
        if joined["reproduced"].notna().sum() == 0:
            continue
        joined = joined.rename(columns={"value": "published"})
        for idx in joined.index[joined["reproduced"].notna()]:
            matched.add(tuple(joined.loc[idx, ["run", "model", "run_task", "method", "variant", "metric"]]))
        out.append(joined)
    if not rep.empty:
        rest = rep[[tuple(r) not in matched for r in rep[["run", "model", "run_task", "method", "variant",
                                                          "metric"]].itertuples(index=False)]].copy()
        if not rest.empty:
            rest["table"] = REPRODUCED_ONLY
            rest["published"] = np.nan
            rest["higher_is_better"] = None
            out.append(rest)
    if not out:
        return pd.DataFrame(columns=["table", *key, "published", "reproduced", "ci_low", "ci_high", "difference"])
    df = pd.concat(out, ignore_index=True)
    df["run_task"] = df["run_task"].fillna(df["task"])
    df["difference"] = df["reproduced"] - df["published"]
    df["higher_is_better"] = [direction(m, v, h) for m, v, h in zip(df["metric"], df["variant"],
                                                                    df["higher_is_better"])]
    cols = ["table", "model", "task", "run_task", "method", "variant", "metric", "published", "reproduced",
            "ci_low", "ci_high", "difference", "n", "higher_is_better", "interval", "protocol", "causal", "tie_break",
            "aggregation", "rules", "quantization", "dtype", "run"]
    for c in cols:
        if c not in df.columns:
            df[c] = np.nan
    return df[cols]


def tie_break_frame(metrics: pd.DataFrame) -> pd.DataFrame:
    """Table 4 under each pixel-perturbation tie-break side by side: one row per (model, task, method, metric,
    variant) of the vision perturbation AUCs, one ``value`` / ``ci_low`` / ``ci_high`` / ``n`` group per
    ``tie_break`` found in ``metrics`` (e.g. two runs, ``tie_break=topk`` and ``tie_break=random``). Empty unless
    at least two tie-breaks are present."""
    from ..metrics.registry import metric_specs

    if metrics.empty or "tie_break" not in metrics.columns:
        return pd.DataFrame()
    table4 = [name for name, spec in metric_specs().items() if spec.curve and spec.section == "3"]
    rows = metrics[metrics["metric"].isin(table4) & metrics["tie_break"].notna()]
    rows = rows[rows["tie_break"].astype(str) != ""]
    if rows["tie_break"].nunique() < 2:
        return pd.DataFrame()
    key = ["model", "task", "method", "metric", "variant"]
    wide = rows.pivot_table(index=key, columns="tie_break", values=["value", "ci_low", "ci_high", "n"],
                            aggfunc="first", dropna=False)
    return wide.sort_index()


def tie_break_markdown(wide: pd.DataFrame, confidence: float) -> str:
    """:func:`tie_break_frame` as Markdown: per tie-break (``topk`` first) the AUC [CI], and each other tie-break
    minus the first."""
    if wide.empty:
        return "runs under only one tie-break"
    from ..metrics.perturbation import TIE_BREAKS

    rank = {m: i for i, m in enumerate(TIE_BREAKS)}
    modes = sorted(wide["value"].columns, key=lambda m: (rank.get(m, len(rank)), m))
    headers = ["model", "task", "method", "metric", "variant"] + [f"{m} [{int(confidence * 100)}% CI]"
                                                                  for m in modes]
    headers += [f"{m} - {modes[0]}" for m in modes[1:]]
    rows = []
    for key, r in wide.iterrows():
        cells = [str(k) for k in key]
        cells[3] += _arrow(direction(key[3], key[4]))
        for m in modes:
            value = r[("value", m)]
            cells.append(_fmt_ci({"reproduced": value, "ci_low": r[("ci_low", m)], "ci_high": r[("ci_high", m)]})
                         if pd.notna(value) else "-")
        cells += [_fmt(r[("value", m)] - r[("value", modes[0])]) for m in modes[1:]]
        rows.append(cells)
    return markdown_table(headers, rows)


def paired_frame(metrics: list[MetricSamples], confidence: float, n_boot: int) -> pd.DataFrame:
    """Every available method pair of :data:`PAIRS` on the same cell, metric and variant."""
    index = {}
    for m in metrics:
        cell = {k: v for k, v in m.cell.items() if k not in ("method", "rules")}
        index[(tuple(sorted(cell.items())), m.metric, m.variant, m.cell["method"])] = m
    rows = []
    for (cell, metric, variant, method), a in sorted(index.items(), key=lambda kv: str(kv[0])):
        for first, second in PAIRS:
            if method != first or (cell, metric, variant, second) not in index:
                continue
            b = index[(cell, metric, variant, second)]
            cmp = paired_comparison(a, b, confidence, n_boot)
            hib = direction(metric, variant)
            better = None if hib is None or not math.isfinite(cmp.difference) else (
                (cmp.difference > 0) == hib if cmp.difference != 0 else None)
            rows.append({**dict(cell), "metric": metric, "variant": variant, "method_a": first, "method_b": second,
                         "difference": cmp.difference, "ci_low": cmp.low, "ci_high": cmp.high,
                         "p_bootstrap": cmp.p_bootstrap, "p_wilcoxon": cmp.p_wilcoxon, "n": cmp.n,
                         "a_better": better})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------------------------------

def _fmt(x, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)) or (isinstance(x, float) and np.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def _fmt_ci(row) -> str:
    if not np.isfinite(row["reproduced"]):
        return "-"
    if np.isfinite(row["ci_low"]) and np.isfinite(row["ci_high"]):
        return f"{_fmt(row['reproduced'])} [{_fmt(row['ci_low'])}, {_fmt(row['ci_high'])}]"
    return _fmt(row["reproduced"])


def _arrow(hib) -> str:
    return {True: " (↑)", False: " (↓)"}.get(hib, "")


def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


COMPARISON_HEADERS = ["model", "task", "method", "variant", "metric", "published", "reproduced [CI]", "diff", "n"]


def _comparison_cells(row) -> list[str]:
    task = row["task"] if row["run_task"] == row["task"] else f"{row['task']} ({row['run_task']})"
    return [str(row["model"]), str(task), str(row["method"]), str(row["variant"]),
            f"{row['metric']}{_arrow(row['higher_is_better'])}", _fmt(row["published"]), _fmt_ci(row),
            _fmt(row["difference"]), "-" if pd.isna(row["n"]) else str(int(row["n"]))]


def comparison_markdown(df: pd.DataFrame, confidence: float) -> str:
    parts = []
    for table, tdf in df.groupby("table", sort=True):
        rows = [_comparison_cells(r) for _, r in tdf.iterrows()]
        intervals = sorted(set(tdf["interval"].dropna().astype(str)))
        parts.append(f"### {table}\n\nreproduced = mean [{int(confidence * 100)}% CI, "
                     f"{'/'.join(intervals) or '-'}]; diff = reproduced - published\n\n"
                     + markdown_table(COMPARISON_HEADERS, rows))
    return "\n\n".join(parts)


def paired_markdown(df: pd.DataFrame) -> str:
    if df.empty:
        return "no method pairs on common samples"
    headers = ["model", "task", "metric", "variant", "A - B", "difference [CI]", "p (bootstrap)", "p (Wilcoxon)",
               "n", "A better?"]
    rows = [[str(r["model"]), str(r["task"]), str(r["metric"]), str(r["variant"]), f"{r['method_a']} - {r['method_b']}",
             f"{_fmt(r['difference'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]", _fmt(r["p_bootstrap"], 4),
             _fmt(r["p_wilcoxon"], 4), str(int(r["n"])),
             {True: "yes", False: "no"}.get(r["a_better"], "-")] for _, r in df.iterrows()]
    return markdown_table(headers, rows)


def _tex(s: str) -> str:
    return (str(s).replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("&", r"\&")
            .replace("#", r"\#"))


def comparison_latex(df: pd.DataFrame, confidence: float) -> str:
    parts = []
    for table, tdf in df.groupby("table", sort=True):
        lines = [r"\begin{table}[t]", r"\centering", r"\small",
                 rf"\caption{{{_tex(table)}: published vs reproduced (mean [{int(confidence * 100)}\% CI])}}",
                 r"\begin{tabular}{lllllrrrr}", r"\toprule",
                 " & ".join(_tex(h) for h in COMPARISON_HEADERS) + r" \\", r"\midrule"]
        for _, r in tdf.iterrows():
            cells = _comparison_cells(r)
            cells[4] = cells[4].replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$")
            lines.append(" & ".join(_tex(c) if i != 4 else c.replace("_", r"\_") for i, c in enumerate(cells))
                         + r" \\")
        lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def paired_latex(df: pd.DataFrame) -> str:
    if df.empty:
        return ""
    lines = [r"\begin{tabular}{llllrrrr}", r"\toprule",
             r"model & task & metric & variant & A $-$ B & difference [CI] & $p$ (boot.) & $p$ (Wilcoxon) \\",
             r"\midrule"]
    for _, r in df.iterrows():
        lines.append(" & ".join([_tex(r["model"]), _tex(r["task"]), _tex(r["metric"]), _tex(r["variant"]),
                                 _tex(f"{r['method_a']} - {r['method_b']}"),
                                 f"{_fmt(r['difference'])} [{_fmt(r['ci_low'])}, {_fmt(r['ci_high'])}]",
                                 _fmt(r["p_bootstrap"], 4), _fmt(r["p_wilcoxon"], 4)]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines)
