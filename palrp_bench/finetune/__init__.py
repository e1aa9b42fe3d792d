"""Training the models the benchmark evaluates: the IMDB classifiers of Tables 1-2 with the official recipe
(:mod:`.imdb`, the command ``palrp-bench-finetune``, priced by :mod:`palrp_bench.planning.training`) and the tiny models
shipped for the embedded suite (:mod:`.tiny_text`, :mod:`.tiny_vit`; ``scripts/train_tiny_*.py`` run them)."""
