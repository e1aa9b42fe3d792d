"""Where to get ImageNet-segmentation (``gtsegs_ijcv.mat``, docs/protocol.md section 4) and whether a local copy is
sound. This script never downloads anything: it prints the command to run yourself, then checks the file.

Checks: MATLAB v7.3 / HDF5 structure (``value/img``, ``value/gt`` object references), 4276 entries, every
(``--all``) or 32 evenly spaced entries readable with an ``[H, W, 3]`` uint8 image and a same-size {0, 1}
mask; prints the size and sha256 (record it; pass ``--sha256`` later to compare against a known digest).

Usage::

    python scripts/get_imagenet_seg.py data/gtsegs_ijcv.mat [--all] [--sha256 HEX]

Exit status: 0 the file is sound, 1 problems found, 2 the file is missing or not HDF5.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import MissingDataError
from .imagenet_seg import IMAGENET_SEG_COUNT, IMAGENET_SEG_FILENAME, IMAGENET_SEG_URL, verify_imagenet_seg


def instructions(path: Path) -> str:
    return (f"{IMAGENET_SEG_FILENAME} (ImageNet-segmentation, Guillaumin et al. IJCV 2014; {IMAGENET_SEG_COUNT} "
            f"images) is not bundled and is never downloaded silently. Get it with:\n"
            f"    mkdir -p {path.parent} && wget -O {path} {IMAGENET_SEG_URL}\n"
            f"(the URL used by the Transformer-Explainability repositories and the official PA-LRP README), "
            f"then run this script again to verify it.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", type=Path, nargs="?", default=Path("data") / IMAGENET_SEG_FILENAME,
                        help=f"local copy of {IMAGENET_SEG_FILENAME} (default: data/{IMAGENET_SEG_FILENAME})")
    parser.add_argument("--all", action="store_true", help="check every entry instead of 32 spread ones")
    parser.add_argument("--sha256", help="expected sha256 of the file (hex); checked when given")
    parser.add_argument("--expected-count", type=int, default=IMAGENET_SEG_COUNT,
                        help="number of entries the file must hold (the real file: %(default)s)")
    args = parser.parse_args(argv)

    if not args.path.is_file():
        print(instructions(args.path))
        return 2
    try:
        report = verify_imagenet_seg(args.path, expected_count=args.expected_count, check_all=args.all,
                                     sha256=args.sha256)
    except MissingDataError as exc:
        print(f"error: {exc}")
        print(instructions(args.path))
        return 2
    print(f"file:    {report.path}")
    print(f"size:    {report.size_bytes} bytes")
    matches = args.sha256 is not None and report.sha256 == args.sha256.strip().lower()
    print(f"sha256:  {report.sha256}" + (" (matches --sha256)" if matches else ""))
    print(f"entries: {report.count} (checked {report.checked})")
    if report.ok:
        print("OK: structure, count and checked entries are as expected")
        return 0
    for problem in report.problems:
        print(f"problem: {problem}")
    return 1
