"""Full-size rehearsal of the paper tables (palrp_bench/bench/rehearse.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.rehearse import main

if __name__ == "__main__":
    sys.exit(main())
