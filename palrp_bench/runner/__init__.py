"""The harness: config -> jobs -> sharded, resumable execution -> tidy CSV + metrics + manifest (docs/architecture.md
"Data flow of one run").

The runner only schedules, stores and merges; what a task does with its samples is
:mod:`palrp_bench.evaluation.tasks`, how a model is loaded :mod:`palrp_bench.models.loading`.

* :mod:`.plan`       cells (model x task x method) and jobs (a cell's shard)
* :mod:`.sharding`   deterministic sample -> shard assignment (stable hash of the sample id)
* :mod:`.devices`    ``runner.devices`` -> one worker per device, CPU fallback
* :mod:`.selection`  which pool samples are evaluated (IMDB / MCQA rules), shard- and batch-independent
* :mod:`.bundles`    a cell's model loaded onto a device, kept for consecutive jobs
* :mod:`.store`      kill-safe JSONL shard stores and the explanation cache
* :mod:`.execute`    one job; :mod:`.workers` many jobs on local devices
* :mod:`.merge`      stores -> ``results.csv`` + ``metrics.csv`` + ``manifest.json``; :mod:`.manifest` environment
* :mod:`.user_cache` the user's cache folder (selection flags, remembered batch sizes, calibrated constants)

What a run will cost and need is :mod:`palrp_bench.planning`; one invocation by mode (plan, calibrate, run,
report) is :mod:`palrp_bench.app`.
"""
