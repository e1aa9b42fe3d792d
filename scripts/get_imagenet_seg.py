"""Where to get gtsegs_ijcv.mat and whether a local copy is sound
(palrp_bench/data/get_imagenet_seg.py; ``--help`` lists the options)."""
import sys

from palrp_bench.data.get_imagenet_seg import main

if __name__ == "__main__":
    sys.exit(main())
