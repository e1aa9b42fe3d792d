"""Benchmark of the attribution methods (time and memory)
(palrp_bench/bench/attribution.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.attribution import main

if __name__ == "__main__":
    sys.exit(main())
