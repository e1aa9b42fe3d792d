"""``python -m palrp_bench.finetune`` (what ``accelerate launch -m palrp_bench.finetune`` runs on several GPUs): the
command ``palrp-bench-finetune``."""
import sys

from .imdb import main

sys.exit(main())
