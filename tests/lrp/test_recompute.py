"""Recompute instead of storing (:mod:`palrp_bench.lrp.recompute`): a checkpointed layer with a position-wise tail
gives the plain gradients, runs the tail in token chunks, recomputes the rest of the layer once in the backward and
the tail not at all then; recording layers and forwards without gradients run as they are."""
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.lrp import recompute, rules


class Counted:
    """A toy layer: a mixing step over tokens (``x + cumsum(x) @ w1``, like attention) then a position-wise tail
    (``tanh(h @ w2) * h``, like a norm, MLP and residual sum), with the widths of every tail call recorded."""

    def __init__(self, width: int = 5, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.w1 = torch.randn(width, width, generator=g, dtype=torch.float64)
        self.w2 = torch.randn(width, width, generator=g, dtype=torch.float64)
        self.mixing_calls = 0
        self.tail_tokens: list[int] = []

    def tail(self, h, sink):
        self.tail_tokens.append(h.shape[1])
        return torch.tanh(h @ self.w2) * rules.scale_grad(h, 0.5) + sink

    def __call__(self, x, sink):
        self.mixing_calls += 1
        h = x + torch.cumsum(x, 1) @ self.w1
        return recompute.tokenwise(self.tail, h, sink)


def _gradients(checkpoint: str, layer: Counted, t: int = 11):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, t, 5, generator=g, dtype=torch.float64, requires_grad=True)
    sink = torch.randn(2, t, 5, generator=g, dtype=torch.float64, requires_grad=True)
    seed = torch.randn(2, t, 5, generator=g, dtype=torch.float64)
    y = recompute.layer(layer, x, sink, checkpoint=checkpoint)
    y = recompute.layer(layer, y, sink, checkpoint=checkpoint)  # two layers sharing a sink, as RoPE leaves would
    return y.detach(), torch.autograd.grad(y, (x, sink), seed)


def test_checkpointed_layers_give_the_plain_values_and_gradients(monkeypatch):
    monkeypatch.setattr(recompute, "CHUNK_ROWS", 2 * 3)  # 3 tokens of a batch of 2
    plain, ckpt = Counted(), Counted()
    y0, g0 = _gradients("none", plain)
    y1, g1 = _gradients("layers", ckpt)
    torch.testing.assert_close(y1, y0, rtol=1e-12, atol=0)
    for a, b in zip(g1, g0):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
    assert plain.mixing_calls == 2 and plain.tail_tokens == [11, 11]
    # forward: once per layer; backward: the mixing part once more per layer, the tail only as a 1-token probe
    # while the layer is recomputed, then once in chunks of 3 tokens (11 = 3 + 3 + 3 + 2)
    assert ckpt.mixing_calls == 4
    chunks = [3, 3, 3, 2]
    assert ckpt.tail_tokens == chunks + chunks + [1] + chunks + [1] + chunks


def test_chunks_hold_a_fixed_number_of_token_rows(monkeypatch):
    assert recompute.chunk_tokens(1) == 4096 and recompute.chunk_tokens(8) == 512
    assert recompute.chunk_tokens(10000) == 1
    monkeypatch.setattr(recompute, "CHUNK_ROWS", 100)
    assert recompute.chunk_tokens(3) == 33


def test_recording_layers_and_forwards_without_gradients_run_as_they_are():
    for context in (rules.attention_hooks(recorder=rules.AttentionRecorder()), torch.no_grad()):
        layer = Counted()
        with context:
            x = torch.randn(1, 4, 5, dtype=torch.float64, requires_grad=True)
            recompute.layer(layer, x, torch.zeros_like(x), checkpoint="layers")
        assert layer.tail_tokens == [4] and layer.mixing_calls == 1  # no chunks, no checkpoint
    layer = Counted()
    x = torch.randn(1, 4, 5, dtype=torch.float64, requires_grad=True)
    y = recompute.layer(layer, x, torch.zeros_like(x), checkpoint="layers", recorder=rules.AttentionRecorder())
    y.sum().backward()
    assert layer.mixing_calls == 1 and layer.tail_tokens == [4]


def test_checkpoint_values_are_checked_in_one_line():
    assert recompute.check_checkpoint(None) == "none"
    assert recompute.check_checkpoint("Layers") == "layers"
    with pytest.raises(BadInputError, match="checkpoint='layer' is not a checkpointing mode -- use one of: none, "
                                            "layers"):
        recompute.check_checkpoint("layer")
