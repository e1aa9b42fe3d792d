"""Throughput of the NLP perturbation protocol (palrp_bench/bench/nlp_perturbation.py; ``--help`` lists the options)."""
import sys

from palrp_bench.bench.nlp_perturbation import main

if __name__ == "__main__":
    sys.exit(main())
