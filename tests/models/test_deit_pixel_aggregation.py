"""Vision aggregation (docs/protocol.md section 1): patch painting and the ReLU'd method maps, on hand-computed
values."""
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.methods.pixel_aggregation import aggregate_pixels, check_vision_method, paint_patches
from palrp_bench.methods.registry import Method, get_method

POSITIONAL = torch.tensor([[[4.0, 8.0], [-16.0, 0.0]]])          # [1, 2, 2] per-patch sums
SEMANTIC = torch.tensor([[[1.0, -3.0, 0.5, 0.0],
                          [-1.0, 2.0, -2.5, 1.0],
                          [3.0, 4.0, 0.0, -1.0],
                          [5.0, 0.0, 1.0, 2.0]]])                 # [1, 4, 4] signed pixel map


def test_paint_patches_spreads_each_patch_score_over_its_pixels():
    painted = paint_patches(POSITIONAL, (2, 2), (4, 4))
    expected = torch.tensor([[[1.0, 1.0, 2.0, 2.0],
                              [1.0, 1.0, 2.0, 2.0],
                              [-4.0, -4.0, 0.0, 0.0],
                              [-4.0, -4.0, 0.0, 0.0]]])
    assert torch.equal(painted, expected)
    assert painted.sum() == POSITIONAL.sum(), "painting preserves the total"


def test_paint_patches_non_square_patches_and_uncovered_border():
    painted = paint_patches(torch.tensor([[[6.0, -2.0]]]), (1, 2), (2, 5))   # one row of two 1x2 patches
    expected = torch.tensor([[[3.0, 3.0, -1.0, -1.0, 0.0],
                              [0.0, 0.0, 0.0, 0.0, 0.0]]])                   # pixels the conv never saw get 0
    assert torch.equal(painted, expected)
    with pytest.raises(BadInputError, match="does not fit"):
        paint_patches(POSITIONAL, (2, 2), (3, 4))


def test_method_maps():
    pa = aggregate_pixels(get_method("pa_lrp"), "official", semantic=SEMANTIC, positional=POSITIONAL, patch_size=(2, 2))
    expected_pa = torch.tensor([[[2.0, 0.0, 2.5, 2.0],
                                 [0.0, 3.0, 0.0, 3.0],
                                 [0.0, 0.0, 0.0, 0.0],
                                 [1.0, 0.0, 1.0, 2.0]]])
    assert torch.equal(pa, expected_pa)
    pe = aggregate_pixels(get_method("pe_only"), "official", semantic=SEMANTIC, positional=POSITIONAL,
                          patch_size=(2, 2))
    expected_pe = torch.tensor([[[1.0, 1.0, 2.0, 2.0],
                                 [1.0, 1.0, 2.0, 2.0],
                                 [0.0, 0.0, 0.0, 0.0],
                                 [0.0, 0.0, 0.0, 0.0]]])
    assert torch.equal(pe, expected_pe)
    expected_sem = torch.tensor([[[1.0, 0.0, 0.5, 0.0],
                                  [0.0, 2.0, 0.0, 1.0],
                                  [3.0, 4.0, 0.0, 0.0],
                                  [5.0, 0.0, 1.0, 2.0]]])
    for name in ("attnlrp", "cp_lrp", "grad_x_input"):
        out = aggregate_pixels(get_method(name), "official", semantic=SEMANTIC, positional=POSITIONAL,
                               patch_size=(2, 2))
        assert torch.equal(out, expected_sem), name


def test_methods_and_aggregations_without_a_vision_meaning_are_refused():
    with pytest.raises(BadInputError, match="eq11 is for RoPE"):
        check_vision_method(get_method("pa_lrp"), "eq11")
    with pytest.raises(BadInputError, match="neither"):
        check_vision_method(Method("nothing", "uses nothing", use_semantic=False, use_positional=False), "official")
    check_vision_method(get_method("pe_only"), "official")  # fine
