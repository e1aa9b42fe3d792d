"""Reports: tidy CSVs -> the paper's tables, published vs reproduced (issue "Reports").

* :mod:`.derive`     per-sample rows -> table metrics (AUAC, AU-MSE, AUC x100, pixel accuracy, mIoU, PE share)
* :mod:`.stats`      confidence intervals (bootstrap / t) and paired comparisons (bootstrap, Wilcoxon)
* :mod:`.published`  the paper's numbers (``results/paper/*.csv``)
* :mod:`.tables`     comparison and paired frames, Markdown / LaTeX rendering
* :mod:`.summary`    the table printed after a run
* :mod:`.plots`      perturbation curves and heatmap galleries (matplotlib, Agg)
* :mod:`.build`      everything into ``<run>/report``; :mod:`.cli` the ``palrp-bench-report`` command
"""
