"""The harness: config -> jobs -> sharded, resumable execution -> tidy CSV + manifest (DESIGN.md data flow).

* :mod:`.schema`     typed Hydra schemas (structured configs) of every config group
* :mod:`.catalog`    the shipped config tree (``palrp_bench/configs``), group files loaded by name
* :mod:`.plan`       cells (model x task x method) and jobs (a cell's shard)
* :mod:`.sharding`   deterministic sample -> shard assignment (stable hash of the sample id)
* :mod:`.devices`    ``runner.devices`` -> one worker per device, CPU fallback
* :mod:`.preflight`  what a plan needs that this machine lacks (GPU, weights, data), as one message
* :mod:`.selection`  which pool samples are evaluated (IMDB / MCQA rules), shard- and batch-independent
* :mod:`.tasks`      task adapters (interface, self-test), :mod:`.text_tasks`, :mod:`.vision_tasks`
* :mod:`.bundles`    loading a cell's model onto a device
* :mod:`.store`      kill-safe JSONL shard stores and the explanation cache
* :mod:`.execute`    one job; :mod:`.workers` many jobs on local devices
* :mod:`.merge`      stores -> ``results.csv`` + ``manifest.json``; :mod:`.manifest` environment facts
* :mod:`.app`        one ``palrp-bench`` invocation (what :mod:`palrp_bench.cli` runs after Hydra)
"""
