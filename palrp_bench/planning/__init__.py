"""Planning: what a run will cost and need, before it starts (docs/planning.md; docs/architecture.md "Layers").

It prices the job list the runner would execute (:mod:`palrp_bench.runner.plan`), and reads what the runner keeps
(stored samples, cached selections, remembered batch sizes); the runner never imports it.

* :mod:`.preflight`  what a plan needs that this machine lacks (devices, weights, tokenizers, data, hub access, a
  model of the kind the task evaluates), every problem with its fix, before any model loads
* :mod:`.cost`       the cost model: seconds per sample, loads, peak memory per device kind
* :mod:`.budget`     ``mode=plan``: samples per cell, stored samples, estimates and totals, the printed plan
* :mod:`.calibrate`  ``mode=calibrate``: measures the cost constants on this machine (user cache)
* :mod:`.training`   what finetuning a missing classifier costs (hours, memory, the cheapest setting that fits): the
  plan's training lines and ``palrp-bench-finetune``'s memory check
"""
