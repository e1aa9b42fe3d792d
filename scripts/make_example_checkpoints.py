"""Save the embedded tiny models as ordinary checkpoints, for the README's "Your own model and data"
(palrp_bench/data/example_checkpoints.py; ``--help`` lists the options)."""
import sys

from palrp_bench.data.example_checkpoints import main

if __name__ == "__main__":
    sys.exit(main())
