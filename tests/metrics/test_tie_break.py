"""Pixel-perturbation tie-break (docs/protocol.md section 3) on tie-heavy maps like real DeiT maps: ReLU'd random
14x14 patch scores, bilinearly upsampled x16, so about half of every map is exactly 0.

* ``topk`` removes exactly what ``torch.topk`` returns on the same tensor (always, in process), and exactly the
  official code's removed sets (``official_pert_ties.npz``) when torch is the version that produced them;
* ``random`` takes no region first (no row bias), depends only on each map's seed (batch-invariant);
* ``tied_pixel_share`` by hand.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import OFFICIAL
from palrp_bench.errors import BadInputError
from palrp_bench.metrics.perturbation import (perturbation_masks, resolve_tie_break, step_pixel_counts,
                                              tied_pixel_share)

TIES = OFFICIAL / "vision" / "official_pert_ties.npz"


def patch_maps(n: int, seed: int) -> torch.Tensor:
    """``[n, 224, 224]`` float32 maps built as the official custom_lrp branch builds them: a ReLU'd 14x14 map
    upsampled bilinearly by 16 (about half of the pixels exactly 0)."""
    patches = torch.relu(torch.randn(n, 1, 14, 14, generator=torch.Generator().manual_seed(seed)) - 1.0)
    return F.interpolate(patches, scale_factor=16, mode="bilinear")[:, 0]


def official_tensor(m: torch.Tensor) -> torch.Tensor:
    """The map as the official code stores it: min-max normalised per image, float32."""
    m = m.clamp(min=0)
    return (m - m.min()) / (m.max() - m.min())


def cut_inside_ties(values: torch.Tensor, k: int, positive: bool) -> bool:
    """Does a cut after ``k`` pixels fall inside a group of equal values (so the tie-break decides)?"""
    ordered = values.reshape(-1).sort(descending=positive).values
    return 0 < k < ordered.numel() and bool(ordered[k - 1] == ordered[k])


@pytest.fixture(scope="module")
def maps():
    return patch_maps(6, 7)


def test_resolve_tie_break():
    assert resolve_tie_break(None, "official") == "topk"
    assert resolve_tie_break(None, "corrected") == "random"
    assert resolve_tie_break("random", "official") == "random"
    assert resolve_tie_break("topk", "corrected") == "topk"
    with pytest.raises(BadInputError, match="unknown tie_break 'index'") as info:
        resolve_tie_break("index", "official")
    assert "\n" not in str(info.value)
    with pytest.raises(BadInputError, match="unknown protocol"):
        resolve_tie_break(None, "paper")


def test_the_maps_are_tie_heavy(maps):
    """Guard for the tests below: many cuts fall inside the zero group, under both directions."""
    normalised = torch.stack([official_tensor(m) for m in maps])
    zeros = (normalised == 0).double().mean(dim=(1, 2))
    assert bool((zeros > 0.3).all()) and bool((zeros < 0.8).all())
    # bilinear x16 upsampling also repeats values (patch edges), so even more pixels tie than are 0
    assert bool((tied_pixel_share(maps) >= zeros).all())
    for positive in (True, False):
        inside = sum(cut_inside_ties(v, k, positive) for v in normalised for k in step_pixel_counts(224 * 224))
        assert inside >= 15, f"only {inside} of 54 cuts inside a tie group (positive={positive})"


@pytest.mark.parametrize("positive", [True, False])
def test_topk_removes_exactly_what_torch_topk_returns(maps, positive):
    masks = perturbation_masks(maps, positive, tie_break="topk").reshape(6, 9, -1)
    for b in range(6):
        v = official_tensor(maps[b]).reshape(1, -1)
        v = v if positive else -v
        for s, k in enumerate(step_pixel_counts(224 * 224)):
            expected = torch.zeros(224 * 224, dtype=torch.bool)
            expected[torch.topk(v, k, dim=-1).indices[0]] = True
            assert torch.equal(masks[b, s], expected), (b, s)


def test_topk_on_a_map_without_range_is_the_official_nan_call():
    """The official 0/0 normalisation gives NaN; topk on that NaN map is what the official code removed."""
    masks = perturbation_masks(torch.full((1, 16, 16), -2.0), True, tie_break="topk").reshape(9, -1)
    nan = torch.full((1, 256), float("nan"))
    for s, k in enumerate(step_pixel_counts(256)):
        assert sorted(torch.nonzero(masks[s]).reshape(-1).tolist()) == sorted(torch.topk(nan, k).indices[0].tolist())


def _fixture_torch() -> str:
    with np.load(TIES) as f:
        return json.loads(str(f["meta_json"]))["versions"]["torch"]


def _unpack(bits: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.unpackbits(bits, axis=-1).astype(bool))


@pytest.mark.skipif(torch.__version__.split("+")[0] != _fixture_torch(),
                    reason=f"the official removed sets were made with torch {_fixture_torch()} on the CPU; the choice "
                           f"among ties is a torch implementation detail (this is {torch.__version__}); the "
                           "in-process torch.topk test above still holds")
def test_topk_equals_the_official_removed_pixels_ties_included():
    """All 4 samples x 9 steps x {pos, neg} x {predicted, target} maps of the official run: identical sets.
    Self-check: ordering ties by pixel index (a stable sort) gives another set in most of these cases, so this
    fixture tells the tie-breaks apart."""
    f = np.load(TIES)
    maps = torch.from_numpy(f["maps"])
    same = differs_by_index = 0
    for sign, positive in (("pos", True), ("neg", False)):
        for kind in ("pred", "target"):
            chosen = maps[f[f"{kind}_map_index"]]
            official = _unpack(f[f"removed_{sign}_{kind}"])
            ours = perturbation_masks(chosen, positive, tie_break="topk").reshape(official.shape)
            same += int((ours == official).all(-1).sum())
            order = torch.sort(chosen.reshape(len(chosen), -1), dim=1, descending=positive, stable=True).indices
            for s, k in enumerate(f["k"]):
                by_index = torch.zeros_like(official[:, s]).scatter_(1, order[:, :int(k)], True)
                differs_by_index += int((by_index != official[:, s]).any(-1).sum())
    assert same == 144
    assert differs_by_index >= 100


def _mean_position(mask: torch.Tensor, axis: int) -> float:
    return float(torch.nonzero(mask)[:, axis].float().mean())


@pytest.mark.parametrize("positive", [True, False])
def test_random_removes_tied_pixels_without_row_bias(maps, positive):
    """Among the zero pixels a step removes only some of, the removed ones sit where the zeros are: their mean
    row / column matches the mean row / column of all zeros within a few standard errors of sampling without
    replacement (index order would take the top rows first: tens of rows off)."""
    seeds = list(range(100, 106))
    masks = perturbation_masks(maps, positive, tie_break="random", seeds=seeds)
    checked = 0
    for b in range(6):
        zero = official_tensor(maps[b]) == 0
        n_zero = int(zero.sum())
        for s, k in enumerate(step_pixel_counts(224 * 224)):
            taken = masks[b, s] & zero
            n_taken = int(taken.sum())
            if not 500 <= n_taken <= n_zero - 500:
                continue  # the cut is not inside the zero group, or too close to its ends to measure
            checked += 1
            for axis in (0, 1):
                spread = float(torch.nonzero(zero)[:, axis].float().std())
                stderr = spread / n_taken ** 0.5 * (1 - n_taken / n_zero) ** 0.5
                gap = abs(_mean_position(taken, axis) - _mean_position(zero, axis))
                assert gap < 5 * stderr, (b, s, axis, gap, stderr)
    assert checked >= 10


def test_random_masks_depend_only_on_each_maps_values_and_seed(maps):
    """Batch invariance, nested steps, and the non-tied pixels are those of any correct tie-break."""
    seeds = [11, 22, 33, 44, 55, 66]
    full = perturbation_masks(maps, True, tie_break="random", seeds=seeds)
    alone = perturbation_masks(maps[[4, 1]], True, tie_break="random", seeds=[55, 22])
    assert torch.equal(alone, full[[4, 1]])
    assert bool((full[:, 1:] >= full[:, :-1]).all())
    other = perturbation_masks(maps, True, tie_break="random", seeds=[s + 1 for s in seeds])
    assert not torch.equal(other, full)  # another seed chooses other tied pixels ...
    topk = perturbation_masks(maps, True, tie_break="topk")
    for b in range(6):
        v = official_tensor(maps[b])
        for s, k in enumerate(step_pixel_counts(224 * 224)):
            cut = v.reshape(-1).sort(descending=True).values[k - 1]
            for m in (full, other, topk):  # ... but all agree on every pixel above the cut value
                assert bool(m[b, s][v > cut].all()) and not bool(m[b, s][v < cut].any())
                assert int(m[b, s].sum()) == k


def test_random_needs_one_seed_per_map(maps):
    with pytest.raises(BadInputError, match="needs one seed per map"):
        perturbation_masks(maps, True, tie_break="random")
    with pytest.raises(BadInputError, match="got 2 seeds for 6 maps"):
        perturbation_masks(maps, True, tie_break="random", seeds=[1, 2])


def test_tied_pixel_share_by_hand():
    # normalised 0.5 1 0 0 0 / 0.25 0 0 0 0: the seven zeros tie (negative values tie with 0 after the ReLU)
    m = torch.tensor([[[2.0, 4.0, -1.0, 0.0, -3.0], [1.0, 0.0, -2.0, 0.0, 0.0]]])
    assert tied_pixel_share(m).tolist() == [pytest.approx(0.7, abs=1e-12)]
    two_groups = torch.tensor([[[1.0, 1.0, 2.0, 3.0, 3.0, 3.0, 4.0, 5.0]]])  # {1,1} and {3,3,3}
    assert tied_pixel_share(two_groups).tolist() == [pytest.approx(5 / 8, abs=1e-12)]
    no_ties = torch.arange(12.0).reshape(1, 3, 4)
    constant = torch.full((1, 3, 4), 5.0)
    shares = tied_pixel_share(torch.cat([no_ties, constant]))
    assert shares.dtype == torch.float64 and shares.tolist() == [0.0, 1.0]
