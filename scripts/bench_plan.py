"""Time and memory of palrp-bench mode=plan (palrp_bench/bench/plan.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.plan import main

if __name__ == "__main__":
    sys.exit(main())
