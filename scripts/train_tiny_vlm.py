"""Train the embedded tiny vision-language model and ship it as a package asset
(palrp_bench/finetune/tiny_vlm.py; ``--help`` lists the options)."""
import sys

from palrp_bench.finetune.tiny_vlm import main

if __name__ == "__main__":
    sys.exit(main())
