"""Reports: a run's ``results.csv`` and ``metrics.csv`` -> the paper's tables, published vs reproduced.

The table numbers themselves come from :mod:`palrp_bench.metrics.table` (``metrics.csv``); nothing here recomputes
them.

* :mod:`.published`     the paper's numbers (package data ``palrp_bench/paper/*.csv``) and how they attach to a
                        ``metrics.csv`` frame (``paper_table``, ``published``, ``difference``)
* :mod:`.metrics_json`  ``metrics.json``: the same rows plus the run's summary, lm-evaluation-harness style
* :mod:`.stats`         paired comparisons on the same samples (scipy bootstrap and permutation test), Holm
* :mod:`.tables`        the paper-shaped tables, the per-cell tables, paired tables; Markdown and LaTeX (Styler)
* :mod:`.summary`       the table printed after a run
* :mod:`.plots`         perturbation curves with bands, relevance-map galleries (matplotlib, Agg)
* :mod:`.build`         everything into ``<run>/report``; :mod:`.cli` the ``palrp-bench-report`` command
"""
