"""One check of a CUDA machine (palrp_bench/bench/gpu_check.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.gpu_check import main

if __name__ == "__main__":
    sys.exit(main())
