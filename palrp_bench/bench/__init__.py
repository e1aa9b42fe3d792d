"""Measuring this machine from a checkout (docs/rehearsal.md): the full-size rehearsal of the paper tables
(:mod:`.rehearse`), hours per table against the goals (:mod:`.gpu_hours`), the one-command GPU check
(:mod:`.gpu_check`), and the benchmarks of attribution, NLP perturbation and planning (:mod:`.attribution`,
:mod:`.nlp_perturbation`, :mod:`.plan`); ``scripts/`` holds their entry points."""
