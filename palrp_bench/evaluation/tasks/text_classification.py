"""``kind: text_classification``: IMDB (Tables 1, 2) and the embedded synthetic sentiment task (docs/protocol.md
section 2): a sequence classifier, tracked class = the gold label, samples batched by length."""
from __future__ import annotations

from itertools import groupby

from . import register_task
from .text_common import TextAdapter


@register_task("text_classification")
class TextClassificationAdapter(TextAdapter):
    """IMDB (Tables 1, 2) and the embedded synthetic sentiment task: tracked class = gold label."""

    model_kinds = ("classifier",)
    perturbation_task = "imdb"
    padded = True

    def _groups(self, samples):
        order = sorted(range(len(samples)), key=lambda i: (len(samples[i].input_ids), i))
        return [list(g) for _, g in groupby(order, key=lambda i: len(samples[i].input_ids))]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        flags = [False] * len(samples)
        for group in self._groups(samples):
            logits = self._logits(bundle, [samples[i] for i in group], ctx)
            for k, i in enumerate(group):
                flags[i] = int(logits[k].argmax()) == samples[i].label
        return flags

    def _correct_flags(self, bundle, samples, explained) -> list[bool | None]:
        # the explained index of a classifier is its predicted class (target=None)
        return [None if s.label is None else bool(e == s.label) for s, e in zip(samples, explained)]
