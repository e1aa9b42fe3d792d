"""Size, build time and browser load time of report.html for a large run (palrp_bench/bench/html_report.py;
``--help`` lists the options)."""
import sys

from palrp_bench.bench.html_report import main

if __name__ == "__main__":
    sys.exit(main())
