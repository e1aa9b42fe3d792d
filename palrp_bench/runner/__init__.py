"""The harness: config -> jobs -> sharded, resumable execution -> tidy CSV + metrics + manifest (DESIGN.md data flow).

The runner only schedules, stores and merges; what a task does with its samples is
:mod:`palrp_bench.evaluation.tasks`, how a model is loaded :mod:`palrp_bench.models.loading`.

* :mod:`.plan`       cells (model x task x method) and jobs (a cell's shard)
* :mod:`.sharding`   deterministic sample -> shard assignment (stable hash of the sample id)
* :mod:`.devices`    ``runner.devices`` -> one worker per device, CPU fallback
* :mod:`.preflight`  what a plan needs that this machine lacks (GPU, weights, data), as one message
* :mod:`.selection`  which pool samples are evaluated (IMDB / MCQA rules), shard- and batch-independent
* :mod:`.bundles`    a cell's model loaded onto a device, kept for consecutive jobs
* :mod:`.store`      kill-safe JSONL shard stores and the explanation cache
* :mod:`.execute`    one job; :mod:`.workers` many jobs on local devices
* :mod:`.merge`      stores -> ``results.csv`` + ``metrics.csv`` + ``manifest.json``; :mod:`.manifest` environment
* :mod:`.app`        one ``palrp-bench`` invocation (what :mod:`palrp_bench.cli` runs after Hydra)
"""
