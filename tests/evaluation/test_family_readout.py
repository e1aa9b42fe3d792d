"""The perturbation read-out (evaluation/nlp_perturbation.readout_logits) gives every RoPE decoder family's own
logits at the last real position: the causal LM's next-token logits (Gemma 2: soft-capped, as the model outputs
them) and the classifier's pooled logits."""
import pytest
import torch

from palrp_bench.evaluation.procedures.nlp_perturbation import readout_logits
from models.tiny_families import FAMILIES, make_model, random_ids


@pytest.mark.parametrize("kind,task", [("causal", "mcqa"), ("classifier", "imdb")])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_readout_equals_the_models_logits(family, kind, task):
    model = make_model(family, kind)
    ids = random_ids(2, 10)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # right padding
    ours = readout_logits(model, ids, mask, task=task)
    with torch.no_grad():
        for i in range(2):
            n = int(mask[i].sum())
            logits = model(input_ids=ids[i:i + 1, :n]).logits
            expected = logits[0, -1] if kind == "causal" else logits[0]
            assert (ours[i] - expected).abs().max() < 1e-5
