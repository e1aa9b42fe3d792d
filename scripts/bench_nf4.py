"""An NF4 layer at one row and at many against a dequantised copy (palrp_bench/bench/nf4.py; ``--help`` lists the
options)."""
import sys

from palrp_bench.bench.nf4 import main

if __name__ == "__main__":
    sys.exit(main())
