"""Hours per table against the goals on this machine (palrp_bench/bench/gpu_hours.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.gpu_hours import main

if __name__ == "__main__":
    sys.exit(main())
