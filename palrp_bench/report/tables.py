"""The report's tables as data frames, and their Markdown / LaTeX rendering.

* :func:`paper_tables`: one table per paper table (Tables 1-5, Appendix F) shaped like the paper's: methods as rows
  (grouped by model where the paper lists several), the paper's columns (task x variant x metric, in the paper's
  order), each split into ``paper`` (the published number) and ``ours`` (``value [low, high]`` from ``metrics.csv``)
  side by side. One table per run setting (protocol, causal, aggregation): Table 3 run causal and non-causal gives
  two. Rows of the paper that were not reproduced show ``-`` under ``ours``. A published number whose metric
  carries a comparability note (``MetricSpec.note``: the AttnLRP paper's IoU, whose definition is unknown) gets
  that note as a footnote; our numbers of such a metric have other variants and are reported apart.
* :func:`cell_tables`: one table per (run, model, task), methods x table metrics: the summary printed after a run
  and the report's "reproduced only" section (cells the paper has no number for).
* :func:`comparison_frame`: the long form of both (``comparison.csv``), including unreproduced published numbers.
* :func:`paired_frame` / :func:`paired_tables`: PA-LRP vs AttnLRP (and the ablations) on the same samples
  (:mod:`palrp_bench.report.stats`), Holm-adjusted per table.
* :func:`tie_break_frame` / :func:`tie_break_table`: Table 4 under each pixel-perturbation tie-break side by side
  (runs made with ``tie_break=topk`` and ``tie_break=random``).

Numbers are never computed here: table numbers and intervals come from ``metrics.csv``
(:mod:`palrp_bench.metrics.table`), published ones from :mod:`palrp_bench.metrics.published`.
Markdown is written by :func:`markdown`; LaTeX by pandas ``Styler.to_latex`` (:func:`latex`), which escapes
``& % $ # _ { } ~ ^ \\`` in every label and cell.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..metrics.table import MetricSamples
from ..metrics.published import PUBLISHED_KEY, attach_published, direction, published_numbers
from .stats import format_p, holm, paired_comparison

#: ``(a, b)`` method pairs compared per sample: PA-LRP vs AttnLRP (every table), PA-LRP vs its ablation (Table 2),
#: the positional part alone vs AttnLRP
PAIRS = (("pa_lrp", "attnlrp"), ("pa_lrp", "pa_lrp_no_multisink"), ("pe_only", "attnlrp"))
REPRODUCED_ONLY = "reproduced only"
#: what separates two reproductions of the same paper table (each gets its own table)
SETTING_COLUMNS = ["run", "protocol", "causal", "tie_break", "aggregation"]
#: what identifies one block of :func:`cell_tables` / :func:`paired_tables`
BLOCK_COLUMNS = ["run", "model", "task"]
PAPER, OURS = "paper", "ours"


def arrow(hib) -> str:
    return {True: " ↑", False: " ↓"}.get(hib, "")


def fmt(x, digits: int = 3) -> str:
    if x is None or isinstance(x, str) or not math.isfinite(float(x)):
        return "-"
    return f"{float(x):.{digits}f}"


@dataclass
class Notes:
    """Footnotes of one table: each distinct note gets a marker ``(1)``, ``(2)``, ... in order of appearance."""

    texts: list[str] = field(default_factory=list)

    def mark(self, note) -> str:
        if not isinstance(note, str) or not note.strip():
            return ""
        if note not in self.texts:
            self.texts.append(note)
        return f" ({self.texts.index(note) + 1})"

    def lines(self) -> list[str]:
        return [f"({i}) {text}" for i, text in enumerate(self.texts, 1)]


def interval_text(row, notes: Notes) -> str:
    """``value [low, high]`` of a ``metrics.csv`` row (the interval is lopsided in general, so both ends are
    printed), with a note marker when the interval has zero width or is missing; a missing value with a note is a
    quantity the metric leaves undefined there (``MetricSpec.undefined``): ``undefined`` and its marker."""
    value, low, high = row["value"], row["ci_low"], row["ci_high"]
    if not (isinstance(value, (int, float)) and math.isfinite(value)):
        note = row.get("note")
        return "undefined" + notes.mark(note) if isinstance(note, str) and note.strip() else "-"
    text = f"{fmt(value)} [{fmt(low)}, {fmt(high)}]" if math.isfinite(low) and math.isfinite(high) else fmt(value)
    return text + notes.mark(row.get("note"))


@dataclass
class Table:
    """A rendered-to-be table: a frame of strings, its title and footnotes."""

    name: str
    title: str
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)


# ----------------------------------------------------------------------------------------------------------------
# tables of a run's cells (summary, "reproduced only")
# ----------------------------------------------------------------------------------------------------------------

def _cells(metrics: pd.DataFrame) -> pd.DataFrame:
    df = metrics.copy()
    df["variant"] = df["variant"].astype(str)
    for col in ("note", "paper_table", "tie_break"):
        if col not in df.columns:
            df[col] = ""
        df[col] = df[col].astype(object).where(df[col].notna(), "").astype(str)
    if "published" not in df.columns:
        df["published"] = np.nan
    return df


def cell_tables(metrics: pd.DataFrame, confidence: float, *, with_published: bool = False) -> list[Table]:
    """One table per (run, model, task) of a ``metrics.csv`` frame: a row per method with ``n``, ``non-finite`` and
    each table metric as ``value [low, high]`` (``(paper P)`` appended where the paper has the number and
    ``with_published``)."""
    if metrics.empty:
        return []
    tables = []
    df = _cells(metrics)
    for (run, model, task), block in df.groupby(BLOCK_COLUMNS, sort=True):
        notes = Notes()
        columns = sorted({(m, v) for m, v in zip(block["metric"], block["variant"])})
        labels = [f"{m}:{v}{arrow(direction(m, v))}" for m, v in columns]
        rows, index = [], []
        for method, mdf in block.groupby("method", sort=True):
            cells = [str(int(mdf["n"].max())), str(int(mdf["n_nonfinite"].max()))]
            for m, v in columns:
                hit = mdf[(mdf["metric"] == m) & (mdf["variant"] == v)]
                if not len(hit):
                    cells.append("-")
                    continue
                row = hit.iloc[0]
                text = interval_text(row, notes)
                if with_published and math.isfinite(row["published"]):
                    text += f" (paper {fmt(row['published'])})"
                cells.append(text)
            rows.append(cells)
            index.append(str(method))
        first = block.iloc[0]
        title = (f"{model} / {task}  (protocol={first['protocol']}, causal={first['causal']}, "
                 f"{_tie_break_text(first, block)}aggregation={first['aggregation']}, "
                 f"{int(round(confidence * 100))}% CI: BCa bootstrap)")
        frame = pd.DataFrame(rows, index=pd.Index(index, name="method"), columns=["n", "non-finite", *labels])
        tables.append(Table(f"{run}/{model}/{task}", title, frame, notes.lines()))
    return tables


# ----------------------------------------------------------------------------------------------------------------
# the paper's tables
# ----------------------------------------------------------------------------------------------------------------

def _paper_order(name: str) -> tuple:
    return (name.startswith("appendix"), name)


def _unique(values) -> list:
    return list(dict.fromkeys(values))


def paper_tables(metrics: pd.DataFrame, published: pd.DataFrame, confidence: float,
                 withheld: dict | None = None) -> list[Table]:
    """One table per paper table and run setting that reproduced at least one of its numbers (module docstring).

    ``metrics``: a ``metrics.csv`` frame (published columns are (re)attached from ``published``; the models of
    ``withheld`` are not the paper's: :func:`~palrp_bench.metrics.published.attach_published`)."""
    if metrics.empty or published.empty:
        return []
    rep = _cells(attach_published(metrics, published, withheld))
    rep["paper_task_key"] = rep["paper_task"].astype(str).where(
        ~rep["paper_task"].astype(str).isin(["", "nan", "None"]), rep["task"].astype(str))
    tables = []
    for name in sorted(published["table"].unique(), key=_paper_order):
        pub = published[published["table"] == name]
        mine = rep[rep["paper_table"].str.split(",").apply(lambda tables: name in tables)]
        if mine.empty:
            continue
        row_fields = ["model", "method"] if pub["model"].nunique() > 1 else ["method"]
        col_fields = [f for f in ("task", "variant", "metric") if pub[f].nunique() > 1] or ["metric"]
        row_keys = _unique(zip(*(pub[f] for f in row_fields)))
        col_keys = _unique(zip(*(pub[f] for f in col_fields)))
        pub_index = {tuple(r[k] for k in PUBLISHED_KEY): r for _, r in pub.iterrows()}
        for setting, runs in mine.groupby(SETTING_COLUMNS, sort=True):
            notes = Notes()
            ours = {}
            for _, r in runs.iterrows():
                key = (r["model"], r["paper_task_key"], r["method"], r["variant"], r["metric"])
                ours.setdefault(key, r)  # two tasks of one setting answering the same paper task: the first
            columns = []
            for ck in col_keys:
                spec = dict(zip(col_fields, ck))
                sample = pub[np.logical_and.reduce([pub[f] == v for f, v in spec.items()])].iloc[0]
                hib = direction(sample["metric"], sample["variant"], sample["higher_is_better"])
                label = tuple(f"{v}{arrow(hib)}" if f == "metric" else str(v) for f, v in spec.items())
                columns += [(*label, PAPER), (*label, OURS)]
            rows = []
            for rk in row_keys:
                cells = []
                for ck in col_keys:
                    fields = {**dict(zip(row_fields, rk)), **dict(zip(col_fields, ck))}
                    for f in PUBLISHED_KEY:
                        if f not in fields:
                            fields[f] = pub[f].iloc[0]
                    key = tuple(fields[k] for k in PUBLISHED_KEY)
                    paper = pub_index.get(key)
                    cells.append(fmt(paper["value"]) + notes.mark(_metric_note(paper["metric"]))
                                 if paper is not None else "-")
                    cells.append(interval_text(ours[key], notes) if key in ours else "-")
                rows.append(cells)
            index = (pd.MultiIndex.from_tuples(row_keys, names=row_fields) if len(row_fields) > 1
                     else pd.Index([k[0] for k in row_keys], name=row_fields[0]))
            frame = pd.DataFrame(rows, index=index,
                                 columns=pd.MultiIndex.from_tuples(columns, names=[*col_fields, ""]))
            setting = dict(zip(SETTING_COLUMNS, setting))
            tasks = sorted({(t, p) for t, p in zip(runs["task"], runs["paper_task_key"]) if t != p})
            task_note = "; ".join(f"task {t} reproduces {p}" for t, p in tasks)
            title = (f"{name}: {PAPER} = published, {OURS} = reproduced, value [{int(round(confidence * 100))}% BCa "
                     f"CI]; run {setting['run']}, protocol={setting['protocol']}, causal={setting['causal']}, "
                     f"{_tie_break_text(setting, runs)}aggregation={setting['aggregation']}"
                     + (f"; {task_note}" if task_note else ""))
            tables.append(Table(name, title, frame, notes.lines()))
    return tables


def _metric_note(metric: str) -> str:
    """The comparability note of a registered metric (``MetricSpec.note``), empty for others."""
    from ..metrics.registry import metric_specs

    spec = metric_specs().get(metric)
    return spec.note if spec is not None else ""


def reproduced_only(metrics: pd.DataFrame, published: pd.DataFrame, confidence: float,
                    withheld: dict | None = None) -> list[Table]:
    """:func:`cell_tables` of the rows the paper has no number for (embedded models, extra methods, mAP, models that
    are not the paper's checkpoint: ``withheld``, ...)."""
    rep = _cells(attach_published(metrics, published, withheld)) if not metrics.empty else metrics
    return cell_tables(rep[rep["paper_table"] == ""], confidence) if not rep.empty else []


def comparison_frame(metrics: pd.DataFrame, published: pd.DataFrame, withheld: dict | None = None) -> pd.DataFrame:
    """Long form: every ``metrics.csv`` row with its published number and difference, plus one row per published
    number that was not reproduced (``value`` NaN, ``note`` the metric's comparability note where it has one: the
    AttnLRP paper's IoU), so a partial run shows what is missing (the rows of a model that is not the paper's
    checkpoint, ``withheld``, reproduce none)."""
    rep = attach_published(metrics, published, withheld) if not metrics.empty else metrics.copy()
    numbers = published_numbers(published)
    if not rep.empty:
        paper_task = rep["paper_task"].astype(str).where(~rep["paper_task"].astype(str).isin(["", "nan", "None"]),
                                                         rep["task"].astype(str))
        mine = [(str(r), str(m)) not in (withheld or {}) for r, m in zip(rep["run"], rep["model"])]
        seen = {key for key, own in zip(zip(rep["model"], paper_task, rep["method"], rep["variant"], rep["metric"]),
                                        mine) if own}
        rep = rep.assign(run_task=rep["task"], task=paper_task)
    else:
        seen = set()
    missing = numbers[[tuple(k) not in seen for k in numbers[PUBLISHED_KEY].itertuples(index=False)]]
    missing = missing.assign(run_task="", value=np.nan, difference=np.nan,
                             note=[_metric_note(str(m)) or np.nan for m in missing["metric"]])
    df = pd.concat([rep, missing], ignore_index=True) if not rep.empty else missing
    pub_hib = {tuple(r[PUBLISHED_KEY]): r["higher_is_better"] for _, r in published.iterrows()}
    df["higher_is_better"] = [direction(m, v, pub_hib.get((mo, t, me, v, m))) for mo, t, me, v, m in
                              zip(df["model"], df["task"], df["method"], df["variant"], df["metric"])]
    cols = ["paper_table", "model", "task", "run_task", "method", "variant", "metric", "published", "value", "ci_low",
            "ci_high", "difference", "n", "n_nonfinite", "higher_is_better", "interval", "note", "protocol", "causal",
            "aggregation", "rules", "quantization", "dtype", "run"]
    for c in cols:
        if c not in df.columns:
            df[c] = np.nan
    df["paper_table"] = df["paper_table"].fillna("").replace("", REPRODUCED_ONLY)
    return df[cols].sort_values(["paper_table", "model", "task", "method", "metric", "variant"],
                                key=lambda s: s.astype(str), kind="stable").reset_index(drop=True)


def _tie_devices(rows: pd.DataFrame) -> list[str]:
    """The device kinds that ordered tied pixels in ``rows`` (the ``tie_device`` column, "," joined per cell),
    without ``any`` (a seeded order that no device chose)."""
    if "tie_device" not in rows.columns:
        return []
    found = {d for v in rows["tie_device"] if isinstance(v, str) for d in v.split(",") if d}
    return sorted(found - {"any"})


def _tie_break_text(row, rows: pd.DataFrame | None = None) -> str:
    """``tie_break=<mode>, `` for cells with pixel perturbation (Table 4), else nothing; under ``topk`` with the
    device kinds that ordered the ties (found in ``rows``): the published Table 4 depends on them."""
    tie_break = row.get("tie_break", "")
    if not (isinstance(tie_break, str) and tie_break):
        return ""
    devices = _tie_devices(rows) if rows is not None else []
    return f"tie_break={tie_break} (ties ordered on {' and '.join(devices)}), " if devices else f"tie_break={tie_break}, "


def tie_break_frame(metrics: pd.DataFrame) -> pd.DataFrame:
    """Table 4 under each pixel-perturbation tie-break side by side: one row per (model, task, method, metric,
    variant) of the vision perturbation AUCs, one ``value`` / ``ci_low`` / ``ci_high`` / ``note`` / ``n`` group per
    ``tie_break`` found in ``metrics`` (e.g. two runs, ``tie_break=topk`` and ``tie_break=random``). Empty unless
    at least two tie-breaks are present."""
    from ..metrics.registry import metric_specs

    if metrics.empty or "tie_break" not in metrics.columns:
        return pd.DataFrame()
    table4 = [name for name, spec in metric_specs().items() if spec.curve and spec.section == "3"]
    rows = _cells(metrics)
    rows = rows[rows["metric"].isin(table4) & (rows["tie_break"] != "")]
    if rows["tie_break"].nunique() < 2:
        return pd.DataFrame()
    key = ["model", "task", "method", "metric", "variant"]
    if "tie_device" not in rows.columns:
        rows = rows.assign(tie_device="")
    wide = rows.pivot_table(index=key, columns="tie_break",
                            values=["value", "ci_low", "ci_high", "note", "n", "tie_device"], aggfunc="first",
                            dropna=False)
    return wide.sort_index()


def tie_break_table(wide: pd.DataFrame, confidence: float) -> Table | None:
    """:func:`tie_break_frame` as a :class:`Table`: per tie-break (``topk`` first) the AUC as ``value [low, high]``,
    and each other tie-break minus the first."""
    if wide.empty:
        return None
    from ..metrics.perturbation import TIE_BREAKS

    rank = {m: i for i, m in enumerate(TIE_BREAKS)}
    modes = sorted(wide["value"].columns, key=lambda m: (rank.get(m, len(rank)), m))
    notes = Notes()
    rows, index = [], []
    for key, r in wide.iterrows():
        cells = []
        for m in modes:
            entry = {"value": r[("value", m)], "ci_low": r[("ci_low", m)], "ci_high": r[("ci_high", m)],
                     "note": r[("note", m)] if ("note", m) in r.index else ""}
            cells.append(interval_text(entry, notes) if pd.notna(entry["value"]) else "-")
        cells += [fmt(r[("value", m)] - r[("value", modes[0])]) for m in modes[1:]]
        rows.append(cells)
        index.append((*key[:3], f"{key[3]}{arrow(direction(key[3], key[4]))}", key[4]))
    columns = [f"{m} [{int(round(confidence * 100))}% CI]" for m in modes] + [f"{m} - {modes[0]}" for m in modes[1:]]
    frame = pd.DataFrame(rows, index=pd.MultiIndex.from_tuples(index, names=list(wide.index.names)),
                         columns=columns)
    title = "Table 4 under each pixel-perturbation tie-break: the AUC per tie-break and the difference"
    if "tie_device" in wide.columns.get_level_values(0):
        devices = {m: _tie_devices(pd.DataFrame({"tie_device": wide[("tie_device", m)]})) for m in modes}
        ordered = [f"{m} on {' and '.join(d)}" for m, d in devices.items() if d]
        if ordered:
            title += f" (ties ordered: {'; '.join(ordered)})"
    return Table("tie_break", title, frame, notes.lines())


def tie_break_markdown(wide: pd.DataFrame, confidence: float) -> str:
    table = tie_break_table(wide, confidence)
    return markdown(table, title=False) if table is not None else "runs under only one tie-break"


# ----------------------------------------------------------------------------------------------------------------
# paired comparisons
# ----------------------------------------------------------------------------------------------------------------

def paired_frame(samples: list[MetricSamples], confidence: float, n_boot: int) -> pd.DataFrame:
    """Every available pair of :data:`PAIRS` on the same cell, metric and variant, with Holm-adjusted p-values per
    (run, model, task) table and ``a_better``: True / False when A is better / worse and the difference is
    significant at ``1 - confidence`` after the Holm adjustment, None otherwise."""
    index = {}
    for m in samples:
        cell = {k: v for k, v in m.cell.items() if k not in ("method", "rules")}
        index[(tuple(sorted(cell.items())), m.metric, m.variant, m.cell["method"])] = m
    rows = []
    for (cell, metric, variant, method), a in sorted(index.items(), key=lambda kv: str(kv[0])):
        for first, second in PAIRS:
            if method != first or (cell, metric, variant, second) not in index:
                continue
            cmp = paired_comparison(a, index[(cell, metric, variant, second)], confidence, n_boot)
            rows.append({**dict(cell), "metric": metric, "variant": variant, "method_a": first, "method_b": second,
                         "difference": cmp.difference, "ci_low": cmp.low, "ci_high": cmp.high, "note": cmp.note,
                         "p_value": cmp.p_value, "n": cmp.n})
    columns = ["metric", "variant", "method_a", "method_b", "difference", "ci_low", "ci_high", "note", "p_value",
               "p_holm", "n", "a_better"]
    if not rows:
        return pd.DataFrame(columns=BLOCK_COLUMNS + columns)
    df = pd.DataFrame(rows)
    alpha = 1.0 - confidence
    df["p_holm"] = np.nan
    for _, block in df.groupby(BLOCK_COLUMNS, sort=False):
        df.loc[block.index, "p_holm"] = holm(block["p_value"].to_numpy())
    better = []
    for r in df.itertuples():
        hib = direction(r.metric, r.variant)
        significant = math.isfinite(r.p_holm) and r.p_holm <= alpha and r.difference != 0
        better.append(((r.difference > 0) == hib) if significant and hib is not None else None)
    df["a_better"] = pd.Series(better, index=df.index, dtype=object)
    return df


def paired_tables(paired: pd.DataFrame, confidence: float) -> list[Table]:
    """One table per (run, model, task) of :func:`paired_frame`; the Holm family is the table's rows."""
    alpha = 1.0 - confidence
    better_header = f"A better? (Holm, α={alpha:g})"
    tables = []
    for (run, model, task), block in paired.groupby(BLOCK_COLUMNS, sort=True):
        notes = Notes()
        rows = []
        for _, r in block.iterrows():
            diff = {"value": r["difference"], "ci_low": r["ci_low"], "ci_high": r["ci_high"], "note": r["note"]}
            verdict = {True: "yes", False: "no (B better)"}.get(r["a_better"], "not significant")
            if direction(r["metric"], r["variant"]) is None:
                verdict = "-"
            rows.append([f"{r['metric']}:{r['variant']}{arrow(direction(r['metric'], r['variant']))}",
                         f"{r['method_a']} - {r['method_b']}", interval_text(diff, notes), format_p(r["p_value"]),
                         format_p(r["p_holm"]), str(int(r["n"])), verdict])
        frame = pd.DataFrame(rows, columns=["metric", "A - B", f"difference [{int(round(confidence * 100))}% CI]",
                                            "p", "p (Holm)", "n", better_header])
        title = (f"{model} / {task} (run {run}): paired on common samples; p from a two-sided paired permutation "
                 f"test, Holm-adjusted over the {len(block)} comparisons of this table")
        tables.append(Table(f"{run}/{model}/{task}", title, frame.set_index("metric"), notes.lines()))
    return tables


# ----------------------------------------------------------------------------------------------------------------
# rendering
# ----------------------------------------------------------------------------------------------------------------

def markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    return "\n".join([line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


def markdown(table: Table, *, title: bool = True) -> str:
    """A :class:`Table` as Markdown: index levels become the first columns, column levels are joined by spaces."""
    frame = table.frame
    index_names = [str(n) for n in frame.index.names]
    headers = index_names + [" ".join(str(p) for p in c if str(p)) if isinstance(c, tuple) else str(c)
                             for c in frame.columns]
    rows = []
    for key, values in zip(frame.index, frame.to_numpy()):
        key = key if isinstance(key, tuple) else (key,)
        rows.append([str(k) for k in key] + [str(v) for v in values])
    parts = ([table.title, ""] if title else []) + [markdown_table(headers, rows)]
    if table.notes:
        parts += [""] + table.notes
    return "\n".join(parts)


def _latex_symbols(text: str) -> str:
    return text.replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$").replace("α", r"$\alpha$")


def latex(table: Table, label: str | None = None) -> str:
    """A :class:`Table` as a LaTeX ``table`` (booktabs rules) via pandas ``Styler.to_latex``; labels and cells are
    escaped by the Styler (``escape="latex"``), arrows become ``$\\uparrow$`` / ``$\\downarrow$``."""
    styler = (table.frame.style.format(escape="latex", formatter=_latex_symbols)
              .format_index(escape="latex", axis=0, formatter=_latex_symbols)
              .format_index(escape="latex", axis=1, formatter=_latex_symbols))
    styler = styler.set_caption(_latex_symbols(_escape(table.title)))
    column_format = "l" * table.frame.index.nlevels + "r" * table.frame.shape[1]
    body = styler.to_latex(hrules=True, position="t", position_float="centering", multicol_align="c",
                           column_format=column_format,
                           multirow_align="t", clines="skip-last;data" if table.frame.index.nlevels > 1 else None,
                           label=label, environment="table")
    if table.notes:
        notes = r" \\ ".join(_latex_symbols(_escape(n)) for n in table.notes)
        body = body.replace(r"\end{table}", r"\par\footnotesize " + notes + "\n" + r"\end{table}")
    return body


def _escape(text: str) -> str:
    """Plain text (titles, notes) escaped for LaTeX with the same Styler machinery as the cells."""
    tabular = pd.DataFrame([[text]]).style.format(escape="latex").hide(axis=0).hide(axis=1).to_latex()
    return tabular.splitlines()[1].removesuffix(r" \\").strip()
