"""Vision perturbation protocol (docs/protocol.md section 3) against the official fixture and a slow reference."""
from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.procedures.vision_perturbation import (IMAGENET_MEAN, IMAGENET_STD, perturbed_logits,
                                                        resolve_normalization, tie_order_device,
                                                        vision_perturbation_curves)
from palrp_bench.metrics.perturbation import perturbation_auc, step_pixel_counts

VISION = Path(__file__).resolve().parents[1] / "data" / "official" / "vision"


@pytest.fixture(scope="module")
def fixture_vit():
    from timm.models.vision_transformer import VisionTransformer
    model = VisionTransformer(embed_dim=64, depth=2, num_heads=2, num_classes=10)
    model.load_state_dict(torch.load(VISION / "deit_d2.pth", map_location="cpu")["model"], strict=True)
    model.norm.eps = 1e-5
    return model.eval()


@pytest.fixture(scope="module")
def fixture_data():
    maps = np.load(VISION / "random_maps.npz")
    return {"images": torch.load(VISION / "images_raw.pt"),
            "targets": torch.tensor(json.loads((VISION / "targets.json").read_text())),
            "pred_maps": torch.from_numpy(maps["rnd_pred"]), "target_maps": torch.from_numpy(maps["rnd_target"]),
            "official": json.loads((VISION / "pert_random_maps.json").read_text())["methods"]["attnlrp"]}


@pytest.mark.parametrize("positive, sign", [(True, "pos"), (False, "neg")])
def test_official_per_sample_curves(fixture_vit, fixture_data, positive, sign):
    d, ref = fixture_data, fixture_data["official"]
    top = vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"], None, positive)
    target = vision_perturbation_curves(fixture_vit, d["images"], d["target_maps"], d["targets"], positive)
    assert top.shape == (2, 9) and top.dtype == torch.float32
    assert top.tolist() == ref["per_sample"][f"{sign}_top"]
    assert target.tolist() == ref["per_sample"][f"{sign}_target"]
    assert perturbation_auc(top) == pytest.approx(100 * ref["summary"][f"{sign}_auc_top"], abs=1e-9)
    assert perturbation_auc(target) == pytest.approx(100 * ref["summary"][f"{sign}_auc_target"], abs=1e-9)


@pytest.mark.parametrize("positive, sign", [(True, "pos"), (False, "neg")])
def test_official_mean_logit_and_probability_curves(fixture_vit, fixture_data, positive, sign):
    """The 0/1 curves are coarse; the official mean logit / probability of the originally predicted class at
    each step pins the exact pixels removed (to float32 rounding)."""
    d, agg = fixture_data, fixture_data["official"]["aggregate"]
    logits = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], positive, include_original=True)
    pred = logits[:, 0].argmax(-1)
    index = pred[:, None, None].expand(-1, 9, 1)
    mean_logit = logits[:, 1:].gather(2, index)[..., 0].mean(0).numpy()
    mean_prob = logits[:, 1:].softmax(-1).gather(2, index)[..., 0].mean(0).numpy()
    key = f"full_lrp_GammaLinear_gammaConv_{sign}"
    np.testing.assert_allclose(mean_logit, agg[f"{key}_logits"], rtol=0, atol=5e-6)
    np.testing.assert_allclose(mean_prob, agg[f"{key}_probalities"], rtol=0, atol=2e-6)


def test_batch_size_does_not_change_the_results(fixture_vit, fixture_data):
    d = fixture_data
    full = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], True, include_original=True)
    # 20 images in chunks of 7, 7, 6: chunks cross the boundary between the two samples
    chunked = perturbed_logits(fixture_vit, d["images"], d["pred_maps"], True, include_original=True, batch_size=7)
    torch.testing.assert_close(chunked, full, rtol=0, atol=1e-4)
    curves = vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"], batch_size=5)
    assert curves.tolist() == vision_perturbation_curves(fixture_vit, d["images"], d["pred_maps"]).tolist()


def test_a_cell_stacks_all_its_curves_in_full_chunks_and_changes_no_row(fixture_vit, fixture_data):
    """The procedure of a cell puts the originals and the four curves of every image (predicted- and target-class
    maps, positive and negative) through one set of forwards of ``forward_batch_size`` images: 37 per image, every
    chunk but the last full, and the rows are those of each curve computed alone."""
    from types import SimpleNamespace

    from palrp_bench.evaluation.explained import PixelBatch
    from palrp_bench.evaluation.procedures.vision_perturbation import (VISION_FORWARDS, curves_logits,
                                                                       run_vision_perturbation)
    d = fixture_data
    n = d["images"].shape[0]
    samples = [SimpleNamespace(sample_id=f"s{i}") for i in range(n)]
    batch = PixelBatch(SimpleNamespace(model=fixture_vit), samples, list(range(n)), d["pred_maps"], [0] * n,
                       [{} for _ in samples], [None] * n, [True] * n, [None] * n, rows={i: [] for i in range(n)},
                       images=d["images"], labels=d["targets"].tolist(), scores_target=d["target_maps"])
    seen = []
    hook = fixture_vit.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    try:
        run_vision_perturbation(batch, SimpleNamespace(protocol="official", tie_break=None, seed=0,
                                                       forward_batch_size=8))
    finally:
        hook.remove()
    assert VISION_FORWARDS == 37 and sum(seen) == n * VISION_FORWARDS and set(seen[:-1]) == {8}
    for metric, maps, labels in (("agreement", d["pred_maps"], None), ("accuracy", d["target_maps"], d["targets"])):
        for positive, variant in ((True, "positive"), (False, "negative")):
            alone = vision_perturbation_curves(fixture_vit, d["images"], maps, labels, positive)
            for i in range(n):
                rows = [v for m, var, _, v in batch.rows[i] if (m, var) == (metric, variant)]
                assert rows == alone[i].tolist(), (metric, variant, i)
    stacked = curves_logits(fixture_vit, d["images"], [(d["pred_maps"], True), (d["target_maps"], False)],
                            include_original=True, batch_size=8)
    torch.testing.assert_close(stacked[:, :10], perturbed_logits(fixture_vit, d["images"], d["pred_maps"], True,
                                                                 include_original=True), rtol=0, atol=1e-4)
    torch.testing.assert_close(stacked[:, 10:], perturbed_logits(fixture_vit, d["images"], d["target_maps"], False),
                               rtol=0, atol=1e-4)


class _Recorder(torch.nn.Module):
    """Linear classifier on 6x6 images that records every input batch it sees."""

    def __init__(self, pretrained_cfg=None):
        super().__init__()
        self.linear = torch.nn.Linear(3 * 6 * 6, 4)
        torch.nn.init.normal_(self.linear.weight, generator=torch.Generator().manual_seed(0))
        self.seen: list[torch.Tensor] = []
        if pretrained_cfg is not None:
            self.pretrained_cfg = pretrained_cfg

    def forward(self, x):
        self.seen.append(x.detach().clone())
        return self.linear(x.flatten(1))


def _documented_seed(seed: int, sample_id: str) -> int:
    """The seed of one image's random tie order, as docs/evaluation.md defines it (written out here)."""
    digest = hashlib.blake2b(f"tie_break|{seed}|{sample_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _slow_reference(model, images, maps, positive, mean, std, tie_break, sample_ids=None, seed=0):
    """Protocol text, one sample and one step at a time: ReLU, min-max (float32), choose int(H*W*p) pixels
    (topk: torch.topk on the flattened map, negated for negative; random: by value, then by position in the
    image's seeded permutation), zero them in the raw image, normalise, classify."""
    out = []
    for n, (img, m) in enumerate(zip(images, maps)):
        v = m.clamp(min=0)
        v = ((v - v.min()) / (v.max() - v.min())).reshape(1, -1)
        if tie_break == "random":
            perm = torch.randperm(v.numel(), generator=torch.Generator().manual_seed(_documented_seed(seed,
                                                                                                     sample_ids[n])))
            position = {int(p): i for i, p in enumerate(perm)}
            flat = v[0].tolist()
            order = sorted(range(len(flat)), key=lambda i: ((-flat[i] if positive else flat[i]), position[i]))
        rows = []
        for k in step_pixel_counts(v.numel()):
            chosen = torch.topk(v if positive else -v, k, dim=-1).indices[0] if tie_break == "topk" else order[:k]
            x = img.clone().reshape(3, -1)
            x[:, chosen] = 0.0
            x = x.reshape(1, *img.shape)
            x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
            with torch.no_grad():
                rows.append(model(x)[0])
        out.append(torch.stack(rows))
    return torch.stack(out)


@pytest.mark.parametrize("tie_break", ["topk", "random"])
@pytest.mark.parametrize("positive", [True, False])
def test_matches_slow_reference_with_ties_and_pretrained_cfg(positive, tie_break):
    g = torch.Generator().manual_seed(1)
    images = torch.rand(3, 3, 6, 6, generator=g)
    maps = torch.randint(-2, 3, (3, 6, 6), generator=g).float()  # ReLU + few values -> heavy ties
    cfg = {"mean": (0.5, 0.5, 0.5), "std": (0.25, 0.5, 1.0)}
    model = _Recorder(cfg).eval()
    ids = ["img/a", "img/b", "img/c"]
    fast = perturbed_logits(model, images, maps, positive, batch_size=4, tie_break=tie_break, sample_ids=ids, seed=3)
    slow = _slow_reference(model, images, maps, positive, cfg["mean"], cfg["std"], tie_break, ids, seed=3)
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-5)


def test_protocol_sets_the_default_tie_break_and_random_is_batch_invariant():
    g = torch.Generator().manual_seed(2)
    images = torch.rand(4, 3, 6, 6, generator=g)
    maps = torch.randint(-3, 2, (4, 6, 6), generator=g).float()  # mostly ties at 0
    model = _Recorder().eval()
    ids = ["s0", "s1", "s2", "s3"]
    corrected = perturbed_logits(model, images, maps, False, protocol="corrected", sample_ids=ids)
    assert torch.equal(corrected, perturbed_logits(model, images, maps, False, tie_break="random", sample_ids=ids))
    official = perturbed_logits(model, images, maps, False, protocol="official", sample_ids=ids)
    assert torch.equal(official, perturbed_logits(model, images, maps, False, tie_break="topk"))
    assert not torch.equal(official, corrected)
    # one image's removed pixels do not depend on which other images share its batch
    pair = perturbed_logits(model, images[[2, 0]], maps[[2, 0]], False, protocol="corrected", sample_ids=["s2", "s0"])
    torch.testing.assert_close(pair, corrected[[2, 0]], rtol=0, atol=1e-6)
    reseeded = perturbed_logits(model, images, maps, False, protocol="corrected", sample_ids=ids, seed=1)
    assert not torch.equal(reseeded, corrected)
    with pytest.raises(BadInputError, match="needs one sample id per image"):
        perturbed_logits(model, images, maps, False, protocol="corrected")
    with pytest.raises(BadInputError, match="unknown tie_break"):
        vision_perturbation_curves(model, images, maps, tie_break="stable")


def test_removed_pixels_are_black_before_normalisation_and_forwards_are_stacked():
    images = torch.full((2, 3, 6, 6), 0.5)
    maps = torch.arange(72.0).reshape(2, 6, 6)
    model = _Recorder().eval()
    vision_perturbation_curves(model, images, maps, batch_size=None)
    assert len(model.seen) == 1 and model.seen[0].shape[0] == 2 * (1 + 9)  # originals + 9 steps, one forward
    mean = torch.tensor(IMAGENET_MEAN).view(3, 1, 1)
    std = torch.tensor(IMAGENET_STD).view(3, 1, 1)
    black, grey = (0 - mean) / std, (0.5 - mean) / std
    step1 = model.seen[0][1]  # sample 0, p = 0.1: int(36 * .1) = 3 most relevant pixels = flat 35, 34, 33
    flat = step1.reshape(3, -1)
    torch.testing.assert_close(flat[:, 33:], black.reshape(3, 1).expand(3, 3))
    torch.testing.assert_close(flat[:, :33], grey.reshape(3, 1).expand(3, 33))
    model.seen.clear()
    vision_perturbation_curves(model, images, maps, batch_size=8)
    assert [x.shape[0] for x in model.seen] == [8, 8, 4]


def test_curves_are_agreement_with_prediction_or_label():
    class Brightness(torch.nn.Module):
        # class 1 when the (normalised) image is bright on average, else class 0
        def forward(self, x):
            s = x.mean(dim=(1, 2, 3))
            return torch.stack([-s, s], dim=1)

    images = torch.ones(1, 3, 10, 10)
    maps = torch.rand(1, 10, 10, generator=torch.Generator().manual_seed(3))
    model = Brightness().eval()
    identity = (lambda x: x - 0.5)
    # removing k of 100 white pixels: mean of (x - .5) is (100 - 2k) / 200 -> class 1 while k < 50
    predicted = vision_perturbation_curves(model, images, maps, normalize=identity)
    assert predicted.tolist() == [[1, 1, 1, 1, 0, 0, 0, 0, 0]]  # k = 50 gives 0 -> tie -> argmax 0
    target0 = vision_perturbation_curves(model, images, maps, labels=torch.tensor([0]), normalize=identity)
    assert target0.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1, 1]]
    # the reference is the prediction on the *unperturbed* image: here it flips already at p = 0.1
    flips_at_once = vision_perturbation_curves(model, images, maps, normalize=lambda x: x - 0.95)
    assert flips_at_once.tolist() == [[0] * 9]


def test_normalisation_resolution():
    x = torch.full((1, 3, 1, 1), 0.5)
    default = resolve_normalization(torch.nn.Identity())(x)
    torch.testing.assert_close(default.reshape(3), (0.5 - torch.tensor(IMAGENET_MEAN)) / torch.tensor(IMAGENET_STD))
    pair = resolve_normalization(torch.nn.Identity(), ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))(x)
    assert torch.count_nonzero(pair) == 0
    with pytest.raises(BadInputError):
        resolve_normalization(torch.nn.Identity(), (1, 2, 3))


def test_user_errors():
    model = _Recorder().eval()
    images, maps = torch.rand(2, 3, 6, 6), torch.rand(2, 6, 6)
    with pytest.raises(BadInputError):
        vision_perturbation_curves(_Recorder().train(), images, maps)
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images * 255, maps)  # not raw [0, 1] pixels
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps[:, :5])
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, labels=torch.tensor([0, 9]))
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, labels=torch.tensor([0.0, 1.0]))
    with pytest.raises(BadInputError):
        vision_perturbation_curves(model, images, maps, batch_size=0)


OFFICIAL_PERT = ("ties", "attnlrp", "pa_lrp", "pe_only")


def _official_pert(name: str) -> dict:
    with np.load(VISION / f"official_pert_{name}.npz") as f:
        data = {k: f[k] for k in f.files}
    data["meta"] = json.loads(str(data.pop("meta_json")))
    return data


_FIXTURE_TORCH = _official_pert("ties")["meta"]["versions"]["torch"]


@pytest.mark.skipif(torch.__version__.split("+")[0] != _FIXTURE_TORCH,
                    reason=f"the official curves on tied maps were made with torch {_FIXTURE_TORCH} on the CPU: which "
                           f"tied pixels torch.topk returns is a torch implementation detail (this is "
                           f"{torch.__version__}); tests/metrics/test_tie_break.py checks topk in process")
@pytest.mark.parametrize("name", OFFICIAL_PERT)
def test_official_curves_on_tie_heavy_maps_with_predicted_targets(fixture_vit, name):
    """The official Table-4 code's per-sample curves on maps with 35-64% exact zeros (tie-heavy 14x14 maps and
    the official attnlrp / pa_lrp / pe_only maps), for the predicted class and for targets that are the model's
    prediction (samples 0, 1) or its runner-up (2, 3), so the target curves are not trivially 0: identical 0/1
    curves and AUCs under protocol=official, and the logit / probability of the predicted class at every step to
    float32 rounding (which pins the removed pixels)."""
    ref = _official_pert(name)
    assert ref["meta"]["device"] == "cpu" and ref["meta"]["batch_size"] == 1
    images = torch.load(VISION / "images_raw.pt")[torch.from_numpy(ref["image_index"])]
    maps = torch.from_numpy(ref["maps"])
    pred_maps, target_maps = maps[ref["pred_map_index"]], maps[ref["target_map_index"]]
    targets = torch.from_numpy(ref["targets"])
    assert ref["pred"].tolist() == targets[:2].tolist() + [0, 0] and ref["pred"][0] != targets[2]
    for sign, positive in (("pos", True), ("neg", False)):
        top = vision_perturbation_curves(fixture_vit, images, pred_maps, None, positive, protocol="official")
        target = vision_perturbation_curves(fixture_vit, images, target_maps, targets, positive, protocol="official")
        assert top.numpy().tolist() == ref[f"{sign}_top"].tolist()
        assert target.numpy().tolist() == ref[f"{sign}_target"].tolist()
        assert perturbation_auc(top) == pytest.approx(100 * float(ref[f"auc_{sign}_top"]), abs=1e-9)
        assert perturbation_auc(target) == pytest.approx(100 * float(ref[f"auc_{sign}_target"]), abs=1e-9)
        logits = perturbed_logits(fixture_vit, images, pred_maps, positive, include_original=True)
        np.testing.assert_allclose(logits[:, 0].numpy(), ref["logits"], rtol=0, atol=1e-5)
        index = logits[:, 0].argmax(-1)[:, None, None].expand(-1, 9, 1)
        np.testing.assert_allclose(logits[:, 1:].gather(2, index)[..., 0].numpy(), ref[f"{sign}_logits"],
                                   rtol=0, atol=1e-5)
        np.testing.assert_allclose(logits[:, 1:].softmax(-1).gather(2, index)[..., 0].numpy(),
                                   ref[f"{sign}_probabilities"], rtol=0, atol=2e-6)
    # the target curves of the runner-up samples carry information (they rise from 0 somewhere)
    assert ref["pos_target"][2:].sum() + ref["neg_target"][2:].sum() > 0


def test_the_tie_fixture_tells_tie_breaks_apart(fixture_vit):
    """Self-check of the test above: another tie-break on the same tied maps moves the logit curves far beyond
    the 1e-5 tolerance (the comparison can fail)."""
    ref = _official_pert("ties")
    images = torch.load(VISION / "images_raw.pt")[torch.from_numpy(ref["image_index"])]
    pred_maps = torch.from_numpy(ref["maps"])[ref["pred_map_index"]]
    logits = perturbed_logits(fixture_vit, images, pred_maps, False, include_original=True, tie_break="random",
                              sample_ids=["a", "b", "c", "d"])
    index = logits[:, 0].argmax(-1)[:, None, None].expand(-1, 9, 1)
    gap = np.abs(logits[:, 1:].gather(2, index)[..., 0].numpy() - ref["neg_logits"])
    assert gap.max() > 1e-2 and (gap > 1e-5).sum() >= 18


def test_official_topk_runs_on_the_models_device_one_map_per_call(monkeypatch):
    """The official code moved its maps to the GPU and called ``torch.topk`` there on ``[batch_size, H * W]``
    (batch size 1 by default), so the device chooses the tied pixels. A model on the ``meta`` device stands in for
    a GPU on machines without one (its forward, which meta tensors cannot run, is replaced): every topk call gets
    one normalised map ``[1, H * W]`` on the model's device, and the perturbed copies are built there too."""
    import palrp_bench.evaluation.procedures.vision_perturbation as procedure

    model = torch.nn.Linear(4, 3).to("meta").eval()
    calls, forwards = [], []
    real_topk = torch.topk

    def topk(values, k, *args, **kwargs):
        calls.append((values.device.type, tuple(values.shape), k))
        return real_topk(values, k, *args, **kwargs)

    def forward(model, normalize, images, device, dtype):
        forwards.append((images.device.type, device.type))
        return torch.zeros(images.shape[0], 3)

    monkeypatch.setattr(torch, "topk", topk)
    monkeypatch.setattr(procedure, "_forward", forward)
    images, maps = torch.rand(2, 3, 16, 16), torch.rand(2, 16, 16)
    logits = perturbed_logits(model, images, maps, False, protocol="official")
    assert logits.shape == (2, 9, 3) and logits.device.type == "cpu"
    assert calls == [("meta", (1, 256), k) for _ in range(2) for k in step_pixel_counts(256)]
    assert forwards and set(forwards) == {("meta", "meta")}
    assert tie_order_device(model) == "meta"
    # the seeded order is the device's choice nowhere, so it is recorded as such
    calls.clear()
    perturbed_logits(model, images, maps, False, protocol="corrected", sample_ids=["a", "b"])
    assert calls == [] and tie_order_device(model, "corrected") == tie_order_device(model, tie_break="random") == "any"
    assert tie_order_device(torch.nn.Linear(2, 2)) == "cpu"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: compares our removed pixels with "
                                                           "the official torch.topk call on that device")
def test_on_a_gpu_the_removed_pixels_are_the_official_call_on_that_gpu(fixture_vit):
    """On a CUDA model the removed pixels are those of ``torch.topk`` on the GPU with the official shape (one
    ``[1, H * W]`` map per call), ties included, and the logits are the model's on exactly those images. Tie-heavy
    maps (ReLU'd 14x14 patch scores upsampled x16, about half exactly 0); how many sets the CPU would have chosen
    differently is printed (206 of 240 on one H100)."""
    from metrics.test_tie_break import official_tensor, patch_maps

    from palrp_bench.evaluation.procedures.vision_perturbation import ANY_DEVICE
    from palrp_bench.numerics import device_kind

    model = copy.deepcopy(fixture_vit).to("cuda")
    maps = patch_maps(4, 11)
    images = torch.rand(4, 3, 224, 224, generator=torch.Generator().manual_seed(3))
    assert tie_order_device(model) == device_kind("cuda") != ANY_DEVICE
    counts = step_pixel_counts(224 * 224)
    differs_from_cpu = 0
    for positive in (True, False):
        logits = perturbed_logits(model, images, maps, positive)
        expected = torch.empty_like(logits)
        for b in range(4):
            v = official_tensor(maps[b]).reshape(1, -1)
            v = v if positive else -v
            for s, k in enumerate(counts):
                on_gpu = torch.topk(v.cuda(), k, dim=-1).indices[0].cpu()
                on_cpu = torch.topk(v, k, dim=-1).indices[0]
                differs_from_cpu += int(set(on_gpu.tolist()) != set(on_cpu.tolist()))
                keep = torch.ones(224 * 224)
                keep[on_gpu] = 0
                image = (images[b] * keep.reshape(1, 224, 224)).cuda()
                with torch.inference_mode():
                    expected[b, s] = model(resolve_normalization(model)(image[None]))[0].float().cpu()
        torch.testing.assert_close(logits, expected, rtol=0, atol=1e-4)
    print(f"CUDA and CPU topk removed different pixel sets in {differs_from_cpu} of {2 * 4 * len(counts)} cases")


#: an image's map is judged for batch invariance when our map of the batch agrees with the float64 map of the same
#: model (copied to float64 on the same device) to this, relative to the map's max |value|
BATCH_COND = 1e-4
#: largest move of a judged map between batch sizes, relative to its max |value| (docs/evaluation.md, "Numerics on
#: GPUs": TF32 convolutions may round differently per batch size)
BATCH_GAP = 1e-3


def _batch_invariance(fixture_vit, device, tf32):
    """Batch invariance of the fixture ViT's ``pa_lrp`` maps on ``device`` under ``tf32`` (docs/evaluation.md,
    "Numerics on GPUs"): six random images explained in one batch and one by one.

    With the official stabilisers some images' maps are decided by rounding (a stabilised ``z + eps`` close to 0:
    on the CPU image 2 of these moves by 21 % under 1e-6 relative input noise and lies 1.3e-2 from its float64 map,
    while with ``stabilizers=none`` every map is stable to 1e-6), so the comparison of relevance judges only the
    well-conditioned images: those whose map of the batch lies within :data:`BATCH_COND` of the float64 map
    (tests/reference/conditioning.py; at least one must be judged; how many is printed). On them the maps of the two
    batch sizes agree to :data:`BATCH_GAP`. Under ``topk`` a map's removed pixels depend on that map alone (one
    official-shape call per map), so on every image removed sets differ only where the maps themselves differ."""
    import palrp_bench
    from palrp_bench.metrics.perturbation import perturbation_masks
    from palrp_bench.numerics import tf32_mode
    from reference.conditioning import judged_samples

    model = copy.deepcopy(fixture_vit).to(device)
    model64 = copy.deepcopy(fixture_vit).to(device=device, dtype=torch.float64)
    images = torch.rand(6, 3, 224, 224, generator=torch.Generator().manual_seed(5))
    pixels = resolve_normalization(model)(images).to(device)
    with tf32_mode(tf32):
        batch = palrp_bench.explain(model, pixels, method="pa_lrp")
        together = batch.scores.float()
        alone = torch.cat([palrp_bench.explain(model, pixels[i:i + 1], method="pa_lrp").scores.float()
                           for i in range(6)])
        sets = [perturbation_masks(m, positive, tie_break="topk") for m in (together, alone) for positive in (1, 0)]
    exact = palrp_bench.explain(model64, pixels.double(), method="pa_lrp", target=batch.target).scores
    scale = exact.abs().amax(dim=(1, 2))
    rounding = ((together.double() - exact).abs().amax(dim=(1, 2)) / scale).tolist()
    judged, line = judged_samples(rounding, BATCH_COND, 1, f"{device}, tf32={tf32}")
    gaps = ((together - alone).abs().amax(dim=(1, 2)) / together.abs().amax(dim=(1, 2))).tolist()
    for i in judged:
        assert gaps[i] <= BATCH_GAP, (f"{line}; image {i}: relevance moved by {gaps[i]:.2e} of its maximum between "
                                      f"batch sizes")
    same_map = (together == alone).flatten(1).all(1)
    moved_sets = 0
    for a, b in ((sets[0], sets[2]), (sets[1], sets[3])):
        moved = (a != b).flatten(2).any(2)  # [maps, steps]
        assert not bool(moved[same_map].any())
        moved_sets += int(moved.sum())
    print(f"{line}; batch gap of the judged images {max(gaps[i] for i in judged):.2e} (all: "
          f"{', '.join(f'{g:.1e}' for g in gaps)}); {int((~same_map).sum())} of 6 maps not bitwise equal; "
          f"{moved_sets} of 108 removed sets moved")
    return judged


def test_tie_sets_follow_the_maps_across_batch_sizes(fixture_vit):
    """The CPU twin of the GPU test below: the same code on the CPU, where image 2's map is the ill-conditioned one
    (7.7e-3 to 1.3e-2 from its float64 map with the native, AVX2 and baseline kernels here; the others <= 7.9e-5),
    so 5 of 6 images are judged."""
    judged = _batch_invariance(fixture_vit, "cpu", "off")
    assert 2 not in judged and len(judged) >= 4


@pytest.mark.cuda
@pytest.mark.parametrize("tf32", ["conv", "off"])
def test_on_a_gpu_tie_sets_follow_the_maps_across_batch_sizes(fixture_vit, tf32):
    """Batch invariance on a GPU, per TF32 choice, on the well-conditioned images (:func:`_batch_invariance`)."""
    _batch_invariance(fixture_vit, "cuda", tf32)
