"""Finetune an IMDB classifier with the official recipe: the command ``palrp-bench-finetune`` from a checkout
(palrp_bench/finetune/imdb.py; ``palrp-bench-finetune --help``)."""
import sys

from palrp_bench.finetune.imdb import main

if __name__ == "__main__":
    sys.exit(main())
