"""Train the embedded tiny text models and ship them as package assets
(palrp_bench/finetune/tiny_text.py; ``--help`` lists the options)."""
import sys

from palrp_bench.finetune.tiny_text import main

if __name__ == "__main__":
    sys.exit(main())
