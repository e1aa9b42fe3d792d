"""Long contexts on one GPU: time and peak memory with layer checkpointing (palrp_bench/bench/long_context.py;
``--help`` lists the options)."""
from palrp_bench.bench.long_context import main

if __name__ == "__main__":
    main()
