"""What the text twins with their own wiring share: GPT-2 / OPT (:mod:`.gpt2`), BERT / RoBERTa (:mod:`.bert`) and
BLOOM (:mod:`.bloom`).

A text twin wraps a loaded Hugging Face model without touching it, calls the model's own linear modules and
re-implements the wiring with the rules of :mod:`palrp_bench.lrp.rules` (registry protocol:
:mod:`palrp_bench.models.registry`). This module holds the parts that are the same for all of them:

* :class:`TextTwin`: which Hugging Face heads a family explains (:data:`HEADS`), input validation
  (:meth:`TextTwin.prepare`; a tokenizer's output mapping is accepted too), the explained position
  (:meth:`TextTwin.explained_index`), the parts the token aggregations read (:meth:`TextTwin.summarize`) and the
  one-line refusal of configurations a family does not reproduce. Input checks, the key-padding mask and the last
  real token are shared with the decoder twin (:mod:`palrp_bench.models.token_inputs`).

The explained output (docs/protocol.md section 1): causal LMs the next-token logits at the last real position;
sequence classifiers their pooled logits (decoders pool the last real token, BERT / RoBERTa the first, [CLS]);
masked LMs the vocabulary logits at a position the caller names (``position=``, e.g. the [MASK] token) or, when
the config has a ``mask_token_id``, the first token with that id.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch

from ..errors import BadInputError, UnsupportedModelError
from ..lrp import rules
from ..lrp.attribution import Attribution, embedding_sink
from ..lrp.composites import Composite
from ..lrp.positional import PositionalRelevance, real_token_positions
from .registry import Twin
from .token_inputs import attention_mask_of, last_real_index, model_inputs, per_token, token_batch

__all__ = ["HEADS", "TextInputs", "TextForward", "TextTwin"]

#: Hugging Face head classes a text twin explains, by class-name suffix
HEADS = {"ForCausalLM": "causal", "LMHeadModel": "causal", "ForSequenceClassification": "classifier",
         "ForMaskedLM": "masked_lm", "ForConditionalGeneration": "seq2seq"}


def head_kind(model) -> str | None:
    """``causal`` / ``classifier`` / ``masked_lm`` / ``seq2seq`` from the model class name, or None for other
    heads."""
    name = type(model).__name__
    return next((kind for suffix, kind in HEADS.items() if name.endswith(suffix)), None)


@dataclass
class TextInputs:
    """Validated inputs: ``input_ids`` ``[B, T]``, ``attention_mask`` ``[B, T]`` (None = no padding),
    ``token_type_ids`` ``[B, T]`` or None, and the explained position per sample (None for a masked LM until the
    forward resolves ``position=``)."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    token_type_ids: torch.Tensor | None
    explained_index: torch.Tensor | None
    #: word embeddings ``[B, T, D]`` to run from instead of looking up ``input_ids`` (an attributor's perturbed or
    #: interpolated input, :func:`palrp_bench.attributors.base.forward_from`); None = the lookup (the semantic sink)
    embeds: torch.Tensor | None = None

    @property
    def mask(self) -> torch.Tensor:
        """The attention mask with ones where none was given."""
        if self.attention_mask is not None:
            return self.attention_mask
        return torch.ones_like(self.input_ids)


@dataclass
class TextForward:
    """One LRP-aware forward: ``logits`` ``[B, C]`` at the explained position, the input-embedding leaf ``embeds``
    ``[B, T, D]`` (semantic sink), the positional sinks (and other sinks, e.g. BERT's token types) by name, the
    explained position ``[B]``, and every position's logits ``[B, T, V]`` when requested (parity tests)."""

    logits: torch.Tensor
    embeds: torch.Tensor
    explained_index: torch.Tensor
    other_sinks: dict = field(default_factory=dict)
    all_logits: torch.Tensor | None = None

    @property
    def sinks(self) -> dict:
        return {"embeds": self.embeds, **self.other_sinks}


class TextTwin(Twin):
    """Base of the text twins (module docstring). A family sets ``model_types``, ``family_name``,
    ``classifier_pooling`` (``"last"`` or ``"first"``) and ``positional``, and implements ``_wire(model)`` (read the
    modules, refuse what it cannot reproduce), ``embedding_table``, ``max_positions``, ``forward`` and
    ``positional_parts``."""

    modality = "tokens"
    starting_relevance = "logit"
    default_composite = "attnlrp"
    model_types: tuple[str, ...] = ()
    family_name = ""
    classifier_pooling = "last"
    heads: tuple[str, ...] = ("causal", "classifier")
    #: the forward takes ``checkpoint="layers"`` (:mod:`palrp_bench.lrp.recompute`)
    checkpointing = True

    @classmethod
    def family(cls) -> str:
        heads = {"causal": "causal LM", "classifier": "sequence classifier", "masked_lm": "masked LM"}
        return f"{cls.family_name} ({', '.join(heads[h] for h in cls.heads)})"

    @classmethod
    def positional_kind_for(cls, model_type: str) -> str | None:
        """The name of the family's positional kind when it covers ``model_type`` (registry protocol)."""
        return cls.positional.name if model_type in cls.model_types else None

    @classmethod
    def supports(cls, model) -> bool:
        if not type(model).__module__.startswith("transformers."):
            return False
        return getattr(getattr(model, "config", None), "model_type", None) in cls.model_types \
            and head_kind(model) in cls.heads

    def __init__(self, model):
        head = head_kind(model)
        if head not in self.heads:
            raise UnsupportedModelError(f"{type(model).__name__} has no head the {self.family_name} twin explains",
                                        f"supported: {self.family()}")
        self.model = model
        self.config = model.config
        self.head_kind = head
        self.is_classifier = head == "classifier"
        self._wire(model)

    def refuse(self, reason: str) -> None:
        """Raise the one-line refusal of a configuration this twin does not reproduce."""
        raise UnsupportedModelError(f"{type(self.model).__name__}: {reason}",
                                    "use a configuration the twin reproduces (docs/positional.md)")

    # ------------------------------------------------------------------ what a family provides
    def _wire(self, model) -> None:
        raise NotImplementedError

    @property
    def embedding_table(self) -> torch.nn.Embedding:
        raise NotImplementedError

    @property
    def max_positions(self) -> int | None:
        """The longest input the model has positions for (None: no limit, e.g. ALiBi)."""
        return None

    def positional_parts(self, inputs: TextInputs, attribution: Attribution, like: torch.Tensor
                         ) -> tuple[PositionalRelevance, dict]:
        """The positional relevance of one pass and extra per-sample entries for ``extras``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ shared protocol
    @staticmethod
    def norm(module, x: torch.Tensor, composite: Composite) -> torch.Tensor:
        """A ``LayerNorm`` module under the composite's norm rule (identity: standard deviation constant)."""
        return rules.layer_norm(x, module.weight, module.bias, module.eps, composite.norm)

    @property
    def device(self) -> torch.device:
        return self.embedding_table.weight.device

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Word-embedding leaf: the semantic sink (:func:`~palrp_bench.lrp.attribution.embedding_sink`)."""
        return embedding_sink(self.embedding_table, input_ids)

    def embed_inputs(self, inputs) -> torch.Tensor:
        """The embeddings a forward starts from: ``inputs.embeds`` when given, else the semantic-sink leaf of
        ``inputs.input_ids``."""
        return inputs.embeds if inputs.embeds is not None else self.embed(inputs.input_ids)

    @staticmethod
    def count_positions(attention_mask: torch.Tensor) -> torch.Tensor:
        """Positions counted from 0 over real tokens, so padding never shifts them (batch invariance)."""
        return real_token_positions(attention_mask)

    def explained_index(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The explained position per sample: the last real token (causal LMs, decoder classifiers), the first real
        token ([CLS]) for first-token classifiers (the library pools position 0, the same token unless the batch is
        left-padded); None for a masked LM (resolved by :meth:`resolve_position`)."""
        b, t = input_ids.shape
        if self.head_kind == "masked_lm":
            return None
        idx = torch.arange(t, device=input_ids.device)
        if self.is_classifier and self.classifier_pooling == "first":  # the first real token ([CLS])
            if attention_mask is None:
                return torch.zeros(b, dtype=torch.long, device=input_ids.device)
            return (attention_mask.long() * (t - idx)).argmax(-1)
        return last_real_index(input_ids, attention_mask, pad_token_id=getattr(self.config, "pad_token_id", None),
                               pool_by_pad=self.is_classifier)

    def resolve_position(self, inputs: TextInputs, position) -> torch.Tensor:
        """The explained position of a masked LM: ``position`` (an int or ``[B]`` ints), else the one the inputs
        carry (``inputs.explained_index``, set once resolved, so rows selected from a batch keep theirs), else the
        first token equal to ``config.mask_token_id``. Other heads: their fixed position (``position`` must be
        None)."""
        b, t = inputs.input_ids.shape
        if self.head_kind != "masked_lm":
            if position is not None:
                raise BadInputError(f"position= is only defined for masked LMs, not for {type(self.model).__name__}",
                                    "drop position= (the explained position is fixed by the head)")
            return inputs.explained_index
        if position is None and inputs.explained_index is not None:
            return inputs.explained_index
        if position is None:
            mask_id = getattr(self.config, "mask_token_id", None)
            if mask_id is None:
                raise BadInputError("a masked LM explains one position, but position= was not given and the config "
                                    "has no mask_token_id", "pass position=<index of the [MASK] token> (or set "
                                    "model.config.mask_token_id = tokenizer.mask_token_id)")
            is_mask = inputs.input_ids == int(mask_id)
            if not bool(is_mask.any(-1).all()):
                raise BadInputError(f"a sample has no [MASK] token (id {mask_id})",
                                    "mask one token per sample or pass position=")
            return is_mask.long().argmax(-1)
        pos = torch.as_tensor(position, device=inputs.input_ids.device).long()
        if pos.dim() == 0:
            pos = pos.expand(b)
        if pos.shape != (b,) or bool((pos < 0).any()) or bool((pos >= t).any()):
            raise BadInputError(f"position must be an int or [{b}] ints in [0, {t - 1}], got {position!r}",
                                "pass the index of the masked token of each sample")
        if inputs.attention_mask is not None and not bool(inputs.attention_mask.gather(1, pos[:, None]).all()):
            raise BadInputError("position= points at a padding token", "pass the index of a real token")
        return pos.clone()

    def prepare(self, inputs, attention_mask=None) -> TextInputs:
        """Check shapes, lengths and ids where the caller keeps them and move them to the model's device
        (:mod:`~palrp_bench.models.token_inputs`; one-line errors for bad input).

        ``inputs``: ``input_ids`` ``[B, T]`` (or ``[T]``), or a tokenizer's output mapping with ``input_ids`` and
        optionally ``attention_mask`` / ``token_type_ids`` (families with token types; the others ignore an all-zero
        ``token_type_ids`` where their library forward takes none: :func:`~.token_inputs.model_inputs`)."""
        has_types = self.type_vocab_size is not None
        found = model_inputs(inputs, attention_mask, model=type(self.model).__name__,
                             takes=("input_ids", "attention_mask", *(("token_type_ids",) if has_types else ())),
                             zero_token_types=not self.library_embeds_token_types)
        inputs, attention_mask, token_type_ids = found["input_ids"], found["attention_mask"], found.get("token_type_ids")
        ids = token_batch(inputs, vocab_size=self.embedding_table.num_embeddings, max_positions=self.max_positions,
                          device=self.device)
        mask = attention_mask_of(attention_mask, ids)
        types = None
        if token_type_ids is not None:
            n_types = self.type_vocab_size

            def check_types(types):
                if bool((types < 0).any()) or bool((types >= n_types).any()):
                    raise BadInputError(f"token type out of range for {n_types} types", "pass the tokenizer's output")

            types = per_token(token_type_ids, ids, "token_type_ids", check_types)
        return TextInputs(ids, mask, types, self.explained_index(ids, mask))

    @property
    def type_vocab_size(self) -> int | None:
        """Number of token types (BERT-style models), else None."""
        return None

    #: the library's forward takes ``token_type_ids`` and embeds them (GPT-2: through its token table) although the
    #: twin has no token types: then even all-zero token types are refused rather than ignored
    library_embeds_token_types = False

    def run(self, inputs: TextInputs, composite: Composite, *, positional_sinks: bool, causal: bool = True,
            attention: str = "sdpa", position=None, **options) -> TextForward:
        """The LRP-aware forward of :func:`palrp_bench.lrp.attribution.attribute` (fresh sinks).

        ``causal``: decoders only (``False`` reproduces the official non-causal runs); ``attention``: ``sdpa`` or
        ``eager``; ``position``: the explained position of a masked LM; family options (``alibi_rule``) pass on."""
        if attention not in ("sdpa", "eager"):
            raise BadInputError(f"unknown attention implementation {attention!r}", "use sdpa or eager")
        known = set(inspect.signature(self.forward).parameters) - {"inputs", "explained_index", "composite",
                                                                    "positional_sinks", "recorder",
                                                                    "return_all_logits"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise BadInputError(f"{type(self.model).__name__} takes no option {', '.join(unknown)}",
                                f"options of the {self.family_name} twin: {', '.join(sorted(known)) or 'none'}")
        index = self.resolve_position(inputs, position)
        return self.forward(inputs, index, composite, positional_sinks=positional_sinks, causal=causal,
                            attention=attention, **options)

    def forward(self, inputs: TextInputs, explained_index: torch.Tensor, composite: Composite, *,
                positional_sinks: bool, causal: bool = True, attention: str = "sdpa", recorder=None,
                return_all_logits: bool = False, **options) -> TextForward:
        raise NotImplementedError

    def summarize(self, inputs: TextInputs, attribution: Attribution) -> dict:
        """Semantic and positional parts (shapes: :class:`~palrp_bench.lrp.explanation.Explanation`; positional
        ``[B, S, C, T]``) plus what the token aggregations need and the explained position in ``extras``."""
        r = attribution.relevance
        semantic = r["embeds"].sum(-1)
        positional, extras = self.positional_parts(inputs, attribution, semantic)
        valid = (inputs.attention_mask.bool() if inputs.attention_mask is not None
                 else torch.ones_like(semantic, dtype=torch.bool))
        return {"semantic": semantic, "semantic_relu": r["embeds"].clamp(min=0).sum(-1),
                "positional": positional.per_sink, "positional_relu": positional.per_sink_relu,
                "positional_shared_relu": positional.shared_relu, "valid": valid,
                "attention_mask": inputs.attention_mask,
                "extras": {"explained_index": attribution.forward.explained_index, **extras}}
