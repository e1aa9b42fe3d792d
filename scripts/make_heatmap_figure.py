"""The paper's heatmap figure: image | AttnLRP | PE only | PA-LRP
(palrp_bench/heatmap_figure.py; ``--help`` lists the options)."""
import sys

from palrp_bench.heatmap_figure import main

if __name__ == "__main__":
    sys.exit(main())
