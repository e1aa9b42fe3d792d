"""The harness: config -> jobs -> sharded, resumable execution -> tidy CSV + metrics + manifest (docs/architecture.md
"Data flow of one run").

The runner only schedules, stores and merges; what a task does with its samples is
:mod:`palrp_bench.evaluation.tasks`, how a model is loaded :mod:`palrp_bench.models.loading`.

* :mod:`.plan`       cells (model x task x method) and jobs (a cell's shard)
* :mod:`.sharding`   deterministic sample -> shard assignment (stable hash of the sample id)
* :mod:`.devices`    ``runner.devices`` -> one worker per device, CPU fallback
* :mod:`.preflight`  what a plan needs that this machine lacks (devices, weights, tokenizers, data, hub access), every
  problem with its fix, before any model loads
* :mod:`.cost`       the cost model: seconds per sample, loads, peak memory per device kind (docs/planning.md)
* :mod:`.budget`     ``mode=plan``: samples per cell, stored samples, estimates and totals, the printed plan
* :mod:`.calibrate`  ``mode=calibrate``: measures the cost constants on this machine (user cache)
* :mod:`.selection`  which pool samples are evaluated (IMDB / MCQA rules), shard- and batch-independent
* :mod:`.bundles`    a cell's model loaded onto a device, kept for consecutive jobs
* :mod:`.store`      kill-safe JSONL shard stores and the explanation cache
* :mod:`.execute`    one job; :mod:`.workers` many jobs on local devices
* :mod:`.merge`      stores -> ``results.csv`` + ``metrics.csv`` + ``manifest.json``; :mod:`.manifest` environment
* :mod:`.app`        one ``palrp-bench`` invocation (what :mod:`palrp_bench.cli` runs after Hydra)
"""
