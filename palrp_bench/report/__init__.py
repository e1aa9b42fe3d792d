"""Reports: a run's ``results.csv`` and ``metrics.csv`` -> the paper's tables, published vs reproduced.

The table numbers themselves come from :mod:`palrp_bench.metrics.table` (``metrics.csv``).

* :mod:`.stats`      paired comparisons of two methods on the same samples (bootstrap, Wilcoxon)
* :mod:`.published`  the paper's numbers (``results/paper/*.csv``)
* :mod:`.tables`     comparison and paired frames, Markdown / LaTeX rendering
* :mod:`.summary`    the table printed after a run
* :mod:`.plots`      perturbation curves and heatmap galleries (matplotlib, Agg)
* :mod:`.build`      everything into ``<run>/report``; :mod:`.cli` the ``palrp-bench-report`` command
"""
