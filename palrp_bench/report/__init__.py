"""Reports: a run's ``results.csv`` and ``metrics.csv`` -> the paper's tables, published vs reproduced.

The table numbers themselves come from :mod:`palrp_bench.metrics.table` (``metrics.csv``), the published ones and
``metrics.json`` from :mod:`palrp_bench.metrics.published` and :mod:`palrp_bench.metrics.metrics_json` (what the
merge writes too); nothing here recomputes them.

* :mod:`.stats`         paired comparisons on the same samples (scipy bootstrap and permutation test), Holm
* :mod:`.tables`        the paper-shaped tables, the per-cell tables, paired tables; Markdown and LaTeX (Styler)
* :mod:`.summary`       the table printed after a run
* :mod:`.plots`         perturbation curves with bands, relevance-map galleries (matplotlib, Agg)
* :mod:`.build`         everything into ``<run>/report``; :mod:`.cli` the ``palrp-bench-report`` command
"""
