"""Vision perturbation metric pieces (docs/protocol.md section 3): x100 AUC, step counts, pixel order, masks (the
tie-break on tie-heavy maps: test_tie_break.py)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.auc import VISION_STEPS
from palrp_bench.metrics.perturbation import (VISION_FRACTIONS, perturbation_auc, perturbation_masks,
                                              pixel_order, pixel_ranks, step_pixel_counts)


def test_grid_and_scale():
    assert VISION_FRACTIONS == pytest.approx([0.1 * i for i in range(1, 10)], abs=1e-12)
    assert VISION_STEPS.scale == 100.0


def test_auc_by_hand():
    # all ones: width 0.8 * height 1 * 100 = 80 (the maximum)
    assert perturbation_auc(np.ones((4, 9))) == pytest.approx(80.0, abs=1e-9)
    assert perturbation_auc(np.zeros(9)) == 0.0
    # 1,1,1,1,0,...: three full intervals (0.3) + one half interval (0.05) -> 35 (official 0.35 without x100)
    assert perturbation_auc([[1, 1, 1, 1, 0, 0, 0, 0, 0]]) == pytest.approx(35.0, abs=1e-9)
    # the area of the mean curve: two samples, one all ones, one all zeros -> 40
    assert perturbation_auc(torch.tensor([[1.0] * 9, [0.0] * 9])) == pytest.approx(40.0, abs=1e-9)


def test_auc_rejects_the_nlp_grid():
    with pytest.raises(BadInputError):
        perturbation_auc(np.ones((2, 11)))


def test_step_counts_truncate_like_the_official_code():
    assert step_pixel_counts(224 * 224) == [5017, 10035, 15052, 20070, 25088, 30105, 35123, 40140, 45158]
    assert step_pixel_counts(10) == [1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert step_pixel_counts(4) == [0, 0, 1, 1, 2, 2, 2, 3, 3]


def _reference_order(values: np.ndarray, positive: bool, seed: int) -> list[int]:
    """Slow reference of the documented random tie-break: by value, then by position in the seeded permutation."""
    flat = values.reshape(-1).tolist()
    permutation = torch.randperm(len(flat), generator=torch.Generator().manual_seed(seed))
    position = {int(p): i for i, p in enumerate(permutation)}
    sign = -1.0 if positive else 1.0
    return sorted(range(len(flat)), key=lambda i: (sign * flat[i], position[i]))


@pytest.mark.parametrize("positive", [True, False])
def test_order_matches_slow_reference_on_heavily_tied_maps(positive):
    g = torch.Generator().manual_seed(0)
    maps = torch.randint(0, 4, (3, 7, 9), generator=g).float()  # only 4 distinct values -> many ties
    seeds = [5, 2**64 - 1, 123456789012345]
    order = pixel_order(maps, positive, seeds)
    for b in range(3):
        assert order[b].tolist() == _reference_order(maps[b].numpy(), positive, seeds[b])


def test_ranks_invert_the_order():
    maps = torch.rand(2, 5, 6, generator=torch.Generator().manual_seed(1))
    order = pixel_order(maps, True, [0, 1])
    ranks = pixel_ranks(order)
    assert torch.equal(order.gather(1, ranks), torch.arange(30).expand(2, 30))


@pytest.mark.parametrize("tie_break", ["topk", "random"])
def test_masks_by_hand_with_relu_ties(tie_break):
    # 2x5 map; negative values tie with 0 after the ReLU. Normalised: 0.5 1 0 0 0 / 0.25 0 0 0 0
    m = torch.tensor([[[2.0, 4.0, -1.0, 0.0, -3.0], [1.0, 0.0, -2.0, 0.0, 0.0]]])
    zeros = {2, 3, 4, 6, 7, 8, 9}
    # positive: 1 (4.0), 0 (2.0), 5 (1.0), then the seven tied zeros in the tie-break's order
    strict_pos = [1, 0, 5]
    # negative: the seven tied zeros first, then 5, 0, 1
    strict_neg = [5, 0, 1]
    pos = perturbation_masks(m, positive=True, tie_break=tie_break, seeds=[3])  # counts for 10 pixels: 1..9
    neg = perturbation_masks(m, positive=False, tie_break=tie_break, seeds=[3])
    assert pos.shape == neg.shape == (1, 9, 2, 5)
    for s in range(9):
        removed = set(torch.nonzero(pos[0, s].reshape(-1)).reshape(-1).tolist())
        assert len(removed) == s + 1
        assert removed == set(strict_pos[: s + 1]) if s < 3 else (removed >= set(strict_pos)
                                                                    and removed - set(strict_pos) <= zeros)
        removed = set(torch.nonzero(neg[0, s].reshape(-1)).reshape(-1).tolist())
        assert len(removed) == s + 1
        assert removed <= zeros if s < 7 else removed == zeros | set(strict_neg[: s - 6])


@pytest.mark.parametrize("tie_break", ["topk", "random"])
def test_masks_are_nested_and_sized(tie_break):
    maps = torch.randn(2, 16, 16, generator=torch.Generator().manual_seed(2))
    masks = perturbation_masks(maps, positive=False, tie_break=tie_break, seeds=[0, 1])
    counts = masks.reshape(2, 9, -1).sum(-1)
    assert counts.tolist() == [step_pixel_counts(256)] * 2
    assert bool((masks[:, 1:] >= masks[:, :-1]).all())


def test_normalisation_does_not_change_the_order_of_a_positive_map():
    maps = torch.rand(2, 8, 8, generator=torch.Generator().manual_seed(3), dtype=torch.float64) + 0.1
    a = perturbation_masks(maps, True)
    b = perturbation_masks(maps * 7.0 + 2.0, True)
    assert torch.equal(a, b)


def test_constant_map_is_all_ties_under_random():
    masks = perturbation_masks(torch.full((1, 2, 5), -1.0), positive=True, tie_break="random", seeds=[9])
    first = torch.randperm(10, generator=torch.Generator().manual_seed(9))[:3]
    assert sorted(torch.nonzero(masks[0, 2].reshape(-1)).reshape(-1).tolist()) == sorted(first.tolist())


@pytest.mark.parametrize("bad", [torch.zeros(3, 3), torch.zeros(1, 2, 3, 3), torch.tensor([[[float("nan")]]])])
def test_bad_maps_are_user_errors(bad):
    with pytest.raises(BadInputError):
        pixel_order(bad, True, [0])


def test_tied_pixel_share_counts_the_pixels_in_groups_of_equal_values():
    """By hand on a 2 x 3 map (ReLU'd and min-max normalised first: -1, -0.0 and 0 become one group of 0) and against
    NumPy's counts of equal values on random maps with ties, on the CPU and on the model's device where there is one."""
    from palrp_bench.metrics.maps import minmax_per_image
    from palrp_bench.metrics.perturbation import tied_pixel_share

    by_hand = torch.tensor([[[-1.0, -0.0, 0.0], [2.0, 4.0, 4.0]], [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],
                            [[7.0, 7.0, 7.0], [7.0, 7.0, 7.0]]])
    assert tied_pixel_share(by_hand).tolist() == [5 / 6, 0.0, 1.0]  # a map without range counts as all tied
    generator = torch.Generator().manual_seed(0)
    maps = torch.randint(-20, 60, (4, 32, 32), generator=generator).float() / 7
    normalised, _ = minmax_per_image(maps, relu=True)
    expected = []
    for m in normalised.reshape(4, -1).numpy():
        _, inverse, counts = np.unique(m, return_inverse=True, return_counts=True)
        expected.append(float((counts[inverse] > 1).mean()))
    assert tied_pixel_share(maps).tolist() == expected
    if torch.cuda.is_available():
        assert tied_pixel_share(maps.cuda()).tolist() == expected
