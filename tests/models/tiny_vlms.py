"""Tiny random vision-language models of every family the twin covers (Qwen2-VL, Qwen2.5-VL, LLaVA, Gemma 3), and
processor-like inputs for them.

One registry (:data:`FAMILIES`) drives every vision-language test module: per family the config and model classes
and the options that exercise what the family adds (Qwen2-VL: M-RoPE sections of unequal width, images of several
grid sizes in one batch; Qwen2.5-VL: windowed vision attention with one full-attention block; LLaVA: CLIP's CLS
token, learned table and feature layer -2; Gemma 3: SigLIP, pooled tokens, bidirectional image blocks). All language
models: 2 layers, hidden 32, vocabulary 96 (ids 3..89 text, 90.. special); vision towers: 2 layers.

Inputs are what a processor returns (``input_ids`` with the image placeholder tokens, ``attention_mask``,
``pixel_values`` and the family's extras), built from normalised images ``[3, H, W]`` through the library's own
layout where there is one (:func:`pixel_values_of`: Qwen2-VL's image processor's ``patchify``), so the gradient of a
library forward can be read on the image itself. Hugging Face initialises norm gains to 1 and biases to 0, which would
leave them unexercised: every norm weight and bias gets N(0, 0.1^2) added.
"""
from __future__ import annotations

import torch
import transformers

from models.tiny_families import perturb_norms_and_biases

VOCAB = 96
IMAGE, VISION_START, VISION_END = 95, 93, 92
TEXT = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, max_position_embeddings=256,
            bos_token_id=1, eos_token_id=2, pad_token_id=2, initializer_range=0.2)

FAMILIES: dict[str, dict] = {
    "qwen2_vl": dict(
        config="Qwen2VLConfig", model="Qwen2VLForConditionalGeneration", patch=4, merge=2, out="hidden_size",
        text=dict(num_attention_heads=2, num_key_value_heads=1,
                  rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}),
        vision=dict(depth=2, embed_dim=16, hidden_size=32, num_heads=2, mlp_ratio=2, patch_size=4,
                    temporal_patch_size=2, spatial_merge_size=2, in_channels=3),
        extra=dict(image_token_id=IMAGE, video_token_id=94, vision_start_token_id=VISION_START,
                   vision_end_token_id=VISION_END)),
    "qwen2_5_vl": dict(
        config="Qwen2_5_VLConfig", model="Qwen2_5_VLForConditionalGeneration", patch=4, merge=2,
        out="out_hidden_size",
        text=dict(num_attention_heads=2, num_key_value_heads=1,
                  rope_parameters={"rope_type": "default", "rope_theta": 1e4, "mrope_section": [2, 3, 3]}),
        # windows of 16 px = 2 x 2 merged tokens; block 0 windowed, block 1 full
        vision=dict(depth=2, hidden_size=16, out_hidden_size=32, intermediate_size=24, num_heads=2, patch_size=4,
                    temporal_patch_size=2, spatial_merge_size=2, in_channels=3, window_size=16,
                    fullatt_block_indexes=[1]),
        extra=dict(image_token_id=IMAGE, video_token_id=94, vision_start_token_id=VISION_START,
                   vision_end_token_id=VISION_END)),
    "llava": dict(
        config="LlavaConfig", model="LlavaForConditionalGeneration", patch=4, merge=1, grids=[(4, 4)],
        # vision_feature_layer -2 of 3 CLIP layers: the second layer's output; a GQA LLaMA language model
        text=dict(model_type="llama", num_attention_heads=4, num_key_value_heads=2),
        vision=dict(model_type="clip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=3,
                    num_attention_heads=2, image_size=16, patch_size=4),
        extra=dict(image_token_id=IMAGE, vision_feature_layer=-2, projector_hidden_act="gelu")),
    "gemma3": dict(
        config="Gemma3Config", model="Gemma3ForConditionalGeneration", patch=2, merge=2, grids=[(8, 8)], tokens=16,
        # 8 x 8 SigLIP patches pooled 2 x 2 into 16 tokens; a sliding window (4) shorter than an image's tokens, so
        # its lower bound cuts through the image blocks; two RoPE tables
        text=dict(model_type="gemma3_text", num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  query_pre_attn_scalar=24, sliding_window=4, layer_types=["sliding_attention", "full_attention"],
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}),
        vision=dict(model_type="siglip_vision_model", hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                    num_attention_heads=2, image_size=16, patch_size=2),
        extra=dict(mm_tokens_per_image=16, image_token_id=IMAGE, boi_token_index=VISION_START,
                   eoi_token_index=VISION_END)),
}
#: grids of the test images (rows, columns of patches; multiples of the merge size), per sample of a batch
GRIDS = [(4, 6), (6, 4), (4, 4)]


def make_vlm(family: str, dtype=torch.float32, seed: int = 0, attn: str = "sdpa", extra: dict | None = None,
             **overrides):
    """A tiny random model of ``family`` in eval mode (module docstring); ``overrides`` update the text config,
    ``extra`` the model config's own fields (image token ids)."""
    spec = FAMILIES[family]
    text = {**TEXT, **spec["text"], **overrides}
    vision = dict(spec["vision"])
    if spec.get("out"):  # the vision tower's output width is the language model's
        vision[spec["out"]] = text["hidden_size"]
    cfg = getattr(transformers, spec["config"])(text_config=text, vision_config=vision, **{**spec["extra"],
                                                                                           **(extra or {})})
    torch.manual_seed(seed)
    model = getattr(transformers, spec["model"])(cfg)
    perturb_norms_and_biases(model)
    with torch.no_grad():  # Gemma 3 initialises its projection to zeros, which would cut the image off
        for name, p in model.named_parameters():
            if name.endswith("mm_input_projection_weight"):
                p.normal_(0.0, 0.2)
    model = model.to(dtype).eval()
    model.config._attn_implementation = attn
    for sub in (cfg.text_config, cfg.vision_config):
        sub._attn_implementation = attn
    return model


def random_images(n: int, grid: tuple[int, int], family: str, seed: int = 0, dtype=torch.float32) -> torch.Tensor:
    """``[n, 3, H, W]`` normalised random images whose patch grid is ``grid``."""
    p = FAMILIES[family]["patch"]
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, grid[0] * p, grid[1] * p, generator=g).to(dtype)


def pixel_values_of(family: str, images: list[torch.Tensor]) -> dict:
    """What the family's image processor makes of normalised images ``[3, H, W]`` (differentiable in them):
    Qwen2-VL's ``patchify`` rows and ``image_grid_thw``; the images themselves for the other families."""
    spec = FAMILIES[family]
    if not family.startswith("qwen"):
        return {"pixel_values": torch.stack(images)}
    processor = transformers.Qwen2VLImageProcessor()
    rows, grids = [], []
    for image in images:
        patches, gh, gw = processor.patchify(image[None], spec["patch"], spec["merge"],
                                             spec["vision"]["temporal_patch_size"])
        rows.append(patches[0])
        grids.append([1, gh, gw])
    return {"pixel_values": torch.cat(rows), "image_grid_thw": torch.tensor(grids)}


def image_token_count(family: str, image: torch.Tensor) -> int:
    spec = FAMILIES[family]
    if "tokens" in spec:
        return spec["tokens"]
    h, w = image.shape[-2] // spec["patch"], image.shape[-1] // spec["patch"]
    return h * w // spec["merge"] ** 2


def sample_ids(family: str, image: torch.Tensor | None, before: int, after: int, seed: int = 0) -> torch.Tensor:
    """``BOS, before text tokens, [vision start, image tokens, vision end], after text tokens`` (``[T]``)."""
    g = torch.Generator().manual_seed(seed)
    text = torch.randint(3, 90, (before + after,), generator=g)
    parts = [torch.tensor([1]), text[:before]]
    if image is not None:
        parts += [torch.tensor([VISION_START]), torch.full((image_token_count(family, image),), IMAGE),
                  torch.tensor([VISION_END])]
    parts.append(text[before:])
    return torch.cat(parts)


def batch_inputs(family: str, ids: list[torch.Tensor], images: list[torch.Tensor], side: str = "right",
                 pixels: dict | None = None) -> dict:
    """A padded batch (pad id 2, ``side`` padding) as the processor returns it; ``pixels``: precomputed
    :func:`pixel_values_of` (to differentiate through), else computed from ``images``."""
    t = max(len(s) for s in ids)
    input_ids = torch.full((len(ids), t), 2, dtype=torch.long)
    mask = torch.zeros(len(ids), t, dtype=torch.long)
    for i, s in enumerate(ids):
        where = slice(t - len(s), t) if side == "left" else slice(0, len(s))
        input_ids[i, where] = s
        mask[i, where] = 1
    out = {"input_ids": input_ids, "attention_mask": mask}
    if images:
        out.update(pixels if pixels is not None else pixel_values_of(family, images))
        if family.startswith("qwen"):
            out["mm_token_type_ids"] = (input_ids == IMAGE).long()
        if family == "gemma3":  # the processor's name for them; the library's mask reads them
            out["token_type_ids"] = (input_ids == IMAGE).long()
    return out


def samples(family: str, n: int = 2, seed: int = 0, dtype=torch.float32):
    """``n`` samples ``(ids, image)`` of different text lengths and image grids."""
    out = []
    grids = FAMILIES[family].get("grids", GRIDS)
    for i in range(n):
        image = random_images(1, grids[i % len(grids)], family, seed=seed + i, dtype=dtype)[0]
        out.append((sample_ids(family, image, 2 + i, 3 + 2 * i, seed=seed + i), image))
    return out


def inputs_of(family: str, n: int = 2, seed: int = 0, side: str = "right", dtype=torch.float32) -> dict:
    """A batch of :func:`samples`."""
    drawn = samples(family, n, seed, dtype)
    return batch_inputs(family, [s for s, _ in drawn], [im for _, im in drawn], side)


def library_logits(model, inputs: dict) -> torch.Tensor:
    """``[B, T, V]`` logits of the library's own forward."""
    with torch.no_grad():
        return model(**inputs).logits


# ---------------------------------------------------------------------------------------- checkpoints with processors
#: the image markers of Qwen2-VL's and Gemma 3's tokenizers (LLaVA's is the tiny tokenizer's <image>)
QWEN_MARKERS = ("<|vision_start|>", "<|image_pad|>", "<|vision_end|>", "<|video_pad|>")
MARKERS = {"gemma3": ("<start_of_image>", "<image_soft_token>", "<end_of_image>")}


def _template(image_text: str) -> str:
    return ("{% for message in messages %}{% for part in message['content'] %}"
            "{% if part['type'] == 'image' %}" + image_text + "{% else %} {{ part['text'] }}{% endif %}"
            "{% endfor %}{% endfor %}{% if add_generation_prompt %} answer :{% endif %}")


def processor_for(family: str):
    """A processor of the family's own class over the tiny VQA tokenizer (palrp_bench.data.synthetic_vqa, plus the
    family's image markers), its image processor at the tiny model's size (the 64-pixel synthetic images: Qwen keeps
    them, LLaVA and Gemma 3 resize them to 16), and a chat template writing the image, the question and ``answer :``;
    the tokenizer's ids are the model's (:func:`save_checkpoint`)."""
    from palrp_bench.data.synthetic_vqa import VQA_IMAGE_SIZE, build_vqa_tokenizer

    tokenizer = build_vqa_tokenizer()  # holds <image>, LLaVA's marker
    spec = FAMILIES[family]
    vision = spec["vision"]
    if family.startswith("qwen"):
        tokenizer.add_special_tokens({"additional_special_tokens": list(QWEN_MARKERS)})
        pixels = VQA_IMAGE_SIZE * VQA_IMAGE_SIZE  # the 64-pixel images kept at their size
        images = transformers.Qwen2VLImageProcessor(patch_size=spec["patch"], merge_size=spec["merge"],
                                                    temporal_patch_size=vision["temporal_patch_size"],
                                                    size={"shortest_edge": pixels, "longest_edge": pixels})
        return transformers.Qwen2VLProcessor(image_processor=images, tokenizer=tokenizer,
                                             video_processor=transformers.Qwen2VLVideoProcessor(),
                                             chat_template=_template("".join(QWEN_MARKERS[:3])))
    size = vision["image_size"]
    if family == "llava":
        images = transformers.CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": size, "width": size})
        return transformers.LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=vision["patch_size"],
                                           vision_feature_select_strategy="default", num_additional_image_tokens=1,
                                           chat_template=_template("<image>"))
    boi, image, eoi = MARKERS["gemma3"]
    tokenizer.add_special_tokens({"additional_special_tokens": [boi, image, eoi]})
    # Gemma 3's processor reads its markers as named special tokens of the tokenizer
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer.backend_tokenizer, bos_token=tokenizer.bos_token, eos_token=tokenizer.eos_token,
        unk_token=tokenizer.unk_token, pad_token=tokenizer.pad_token,
        extra_special_tokens={"boi_token": boi, "image_token": image, "eoi_token": eoi})
    images = transformers.Gemma3ImageProcessor(size={"height": size, "width": size})
    return transformers.Gemma3Processor(image_processor=images, tokenizer=tokenizer, image_seq_length=spec["tokens"],
                                        chat_template=_template(boi))


def checkpoint_ids(family: str, tokenizer) -> dict:
    """The model config's token ids (vocabulary size, image marker ids) from the tokenizer's."""
    ids = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id, "bos_token_id": tokenizer.bos_token_id,
           "eos_token_id": tokenizer.eos_token_id}
    if family.startswith("qwen"):
        extra = {name: tokenizer.convert_tokens_to_ids(token) for name, token in zip(
            ("vision_start_token_id", "image_token_id", "vision_end_token_id", "video_token_id"), QWEN_MARKERS)}
    elif family == "llava":
        extra = {"image_token_id": tokenizer.convert_tokens_to_ids("<image>")}
    else:
        boi, image, eoi = (tokenizer.convert_tokens_to_ids(t) for t in MARKERS["gemma3"])
        extra = {"image_token_id": image, "boi_token_index": boi, "eoi_token_index": eoi}
    return ids, extra


def save_checkpoint(family: str, folder) -> str:
    """A tiny random model of ``family`` with ids matching :func:`processor_for`'s tokenizer, saved with its processor
    (what ``model.source`` of a shipped ``kind: vlm`` config loads)."""
    processor = processor_for(family)
    text, extra = checkpoint_ids(family, processor.tokenizer)
    model = make_vlm(family, extra=extra, **text)
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return str(folder)
