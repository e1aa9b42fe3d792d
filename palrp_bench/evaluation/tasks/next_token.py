"""``kind: next_token``: ARC-Easy MCQA and Wikipedia (Table 3) and the embedded synthetic MCQA (docs/protocol.md
section 2): a causal LM, tracked token = the prediction."""
from __future__ import annotations

from . import register_task
from .text_common import TextAdapter


@register_task("next_token")
class NextTokenAdapter(TextAdapter):
    """ARC-Easy MCQA and Wikipedia (Table 3) and the embedded synthetic MCQA: tracked token = the prediction.

    ``correct`` reads the arg-max token the official way (its last character is the answer letter); samples
    without ``meta['answer_letter']`` (Wikipedia) have no ``correct`` row."""

    model_kinds = ("causal",)
    perturbation_task = "mcqa"

    def _perturbation_task_of(self, task) -> str:
        return "wikipedia" if task.dataset == "wikipedia" else "mcqa"

    def _explain_options(self, ctx):
        return {"causal": self._causal(ctx)}

    def _letters(self, bundle, token_ids) -> list[str | None]:
        from ...data.arc import predicted_letter

        return [predicted_letter(bundle.tokenizer, int(t)) for t in token_ids]

    def correct(self, bundle, samples, ctx) -> list[bool]:
        logits = self._logits(bundle, samples, ctx)
        letters = self._letters(bundle, logits.argmax(-1))
        return [s.meta.get("answer_letter") is not None and letter == s.meta["answer_letter"]
                for s, letter in zip(samples, letters)]

    def _correct_flags(self, bundle, samples, explained) -> list[bool | None]:
        letters = self._letters(bundle, explained)
        return [None if s.meta.get("answer_letter") is None else bool(letter == s.meta["answer_letter"])
                for s, letter in zip(samples, letters)]
