"""The result of one explanation: what ``palrp_bench.explain`` returns (docs/protocol.md section 1)."""
from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class Explanation:
    """Per-sample relevance of one batch under one method.

    Language models (LLaMA family, RoPE):

    * ``scores``     ``[B, T]`` final per-token scores of the method (docs/protocol.md section 1 aggregation).
    * ``semantic``   ``[B, T]`` signed semantic relevance ``sum_d R(E_i)[d]`` of the pass the method uses.
    * ``positional`` ``[B, L, 2, T]`` signed positional relevance per layer ``L``, with ``[:, :, 0]`` the cos
      sink and ``[:, :, 1]`` the sin sink, summed over head dims, heads, and the q and k sides. All zeros for
      methods whose pass keeps cos/sin constant (attnlrp, cp_lrp, grad_x_input).

    Other text families (``docs/positional.md``): ``positional`` is ``[B, S, C, T]`` per sink and component:
    ``[B, 1, 1, T]`` for a learned position table (GPT-2, OPT, BERT, RoBERTa; ``extras["token_type"]`` ``[B, T]`` for
    BERT-style token types), ``[B, L, 1, T]`` for ALiBi (BLOOM; ``extras["alibi_query"]`` / ``["alibi_key"]``
    ``[B, L, T]``), ``[B, L_enc, 1, T_enc]`` for T5's relative position bias, over the encoder tokens as ``scores`` and
``semantic`` are (the decoder's own tokens in ``extras["decoder_scores"]``, ``["decoder_semantic"]``,
``["decoder_positional"]``; :meth:`palrp_bench.models.t5.T5Twin.split`). ``extras["explained_index"]`` ``[B]`` is
the explained position (T5: the decoder position). With a learned position table,
    ``extras["embeddings"]`` (``full`` / ``partial``) says whether the scores of ``attnlrp``, ``cp_lrp`` and
    ``grad_x_input`` add the positional part to ``semantic`` (which stays the token embeddings' relevance).

    Vision transformers (DeiT, learned PE; RoPE ViTs: ``positional`` ``[B, S, 2, Hp, Wp]``, the learned table first
    when present, then ``(cos, sin)`` per layer):

    * ``scores``     ``[B, H, W]`` final pixel map (ReLU'd as the method prescribes).
    * ``semantic``   ``[B, H, W]`` signed semantic pixel relevance (patch-embedding input summed over RGB).
    * ``positional`` ``[B, Hp, Wp]`` signed per-patch positional relevance ``sum_d R(P)[p, d]`` (CLS dropped).
    * ``extras["cls_semantic"]``, ``extras["cls_positional"]`` ``[B]``: the CLS (and distillation) terms the
      official aggregation drops (Appendix F shares can be computed with and without them).

    * ``extras["scores_signed"]`` ``[B, H, W]``: the map before the final ReLU (protocols that order pixels by
      signed relevance read it).
    * ``extras["positional_term"]`` ``[B, Hp, Wp]``: the per-patch positional term the method adds to the semantic
      map before painting (``positional`` itself for a learned PE; RoPE sinks reduced as the method reduces them).

    LRP methods on language models also return the two per-token terms their aggregation combines,
    ``extras["semantic_term"]`` and ``extras["positional_term"]`` ``[B, T]`` (official: the signed ``semantic`` and
    ``sum_k (|pcos| + |psin|)`` or its signed ablation; eq11: the ReLU sums; 0 at padding;
    :func:`palrp_bench.methods.token_aggregation.token_terms`): what the HTML report shows per token.

    Common: ``logit`` ``[B]`` the explained value (the target logit; with a foil the difference
    ``logit[target] - logit[foil]``), ``target`` ``[B]`` the explained index, ``extras["foil"]`` ``[B]`` the foil
    index (contrastive explanations only), ``stabilizers`` the name of the epsilon-rule stabilisers the pass used
    (``none`` for baselines), ``forward_passes`` / ``backward_passes`` ``[B]`` the model passes each sample cost,
    ``extras["absorbed"]`` ``[B]`` (LRP methods) the starting relevance that reached no sink
    (:func:`palrp_bench.lrp.attribution.absorbed_relevance`): ``semantic`` + ``positional`` + the other sinks' parts
    (T5: the ``decoder_*`` twins; BERT: ``token_type``; ViTs: ``cls_semantic``, ``cls_positional``) + absorbed =
    the starting relevance. Baselines that
    are not one LRP pass (:mod:`palrp_bench.attributors`) fill ``semantic`` with their scores and ``positional``
    with zeros (they put no relevance on the positional encoding).
    """

    scores: torch.Tensor
    semantic: torch.Tensor
    positional: torch.Tensor
    logit: torch.Tensor
    target: torch.Tensor
    method: str
    rules: str
    aggregation: str
    attention_mask: torch.Tensor | None = None
    extras: dict = field(default_factory=dict)
    stabilizers: str = "none"
    forward_passes: torch.Tensor | None = None
    backward_passes: torch.Tensor | None = None

    def _map(self, fn) -> "Explanation":
        """The explanation with ``fn`` applied to every tensor (names and other values kept)."""
        return Explanation(fn(self.scores), fn(self.semantic), fn(self.positional), fn(self.logit), fn(self.target),
                           self.method, self.rules, self.aggregation, fn(self.attention_mask),
                           {k: fn(v) for k, v in self.extras.items()}, self.stabilizers, fn(self.forward_passes),
                           fn(self.backward_passes))

    def to(self, device) -> "Explanation":
        """Move every tensor to ``device`` (e.g. "cpu" before storing results)."""
        return self._map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x)

    def __getitem__(self, index) -> "Explanation":
        """Select samples of the batch (``rel[0]``, ``rel[mask]``); keeps the batch dimension for ints."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return self._map(lambda x: x[index] if isinstance(x, torch.Tensor) and x.dim() > 0 else x)
