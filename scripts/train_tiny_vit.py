"""Train the embedded tiny ViT and ship them as package assets
(palrp_bench/finetune/tiny_vit.py; ``--help`` lists the options)."""
import sys

from palrp_bench.finetune.tiny_vit import main

if __name__ == "__main__":
    sys.exit(main())
