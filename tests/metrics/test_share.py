"""Appendix F positional share (metrics/share.py): hand-computed signed / abs / CLS / pooled / map readings."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.metrics.share import (map_share, pooled_positional_share, positional_share,
                                       positional_share_of_explanation, relevance_totals)

# image 0: S = 0.6 - 0.2 + 0.4 + 0.0 = 0.8, |S| = 1.2;  P = 0.3 - 0.1 = 0.2, |P| = 0.4
# image 1: S = 1.0, |S| = 1.0;  P = 0.0 + 0.5 = 0.5, |P| = 0.5
SEM = torch.tensor([[[0.6, -0.2], [0.4, 0.0]], [[1.0, 0.0], [0.0, 0.0]]])
POS = torch.tensor([[0.3, -0.1], [0.0, 0.5]])


def test_signed_share_by_hand():
    share = positional_share(SEM, POS)
    assert share.dtype == torch.float64
    assert share.tolist() == pytest.approx([100 * 0.2 / 1.0, 100 * 0.5 / 1.5])


def test_abs_share_by_hand():
    assert positional_share(SEM, POS, use_abs=True).tolist() == pytest.approx([100 * 0.4 / 1.6, 100 * 0.5 / 1.5])


def test_cls_terms_enter_both_totals():
    cls = (torch.tensor([0.2, -0.5]), torch.tensor([0.6, 0.0]))
    # image 0: S = 1.0, P = 0.8 ; image 1: S = 0.5, P = 0.5
    assert positional_share(SEM, POS, cls_terms=cls).tolist() == pytest.approx([100 * 0.8 / 1.8, 50.0])
    # abs: image 1: |S| = 1.0 + 0.5
    assert positional_share(SEM, POS, cls_terms=cls, use_abs=True)[1].item() == pytest.approx(100 * 0.5 / 2.0)


def test_per_image_totals_are_accepted_without_abs_only():
    s, p = relevance_totals(SEM, POS)
    assert positional_share(s, p).tolist() == pytest.approx(positional_share(SEM, POS).tolist())
    with pytest.raises(BadInputError):
        positional_share(s, p, use_abs=True)


def test_pooled_share_is_a_ratio_of_sums_not_a_mean_of_ratios():
    s, p = relevance_totals(SEM, POS)
    assert pooled_positional_share(s, p) == pytest.approx(100 * 0.7 / 2.5)
    assert pooled_positional_share(s, p) != pytest.approx(positional_share(SEM, POS).mean().item())


def test_map_share_by_hand():
    ours = torch.tensor([[[1.0, 1.0], [0.0, 2.0]]])
    pe = torch.tensor([[[0.5, 0.0], [0.0, 0.5]]])
    assert map_share(ours, pe).tolist() == pytest.approx([25.0])


def test_explanation_helper_and_errors():
    extras = {"cls_semantic": torch.tensor([0.2, -0.5]), "cls_positional": torch.tensor([0.6, 0.0])}
    expl = SimpleNamespace(semantic=SEM, positional=POS, extras=extras)
    assert positional_share_of_explanation(expl, include_cls=True).tolist() == pytest.approx([100 * 0.8 / 1.8, 50.0])
    with pytest.raises(BadInputError):
        positional_share_of_explanation(SimpleNamespace(semantic=SEM, positional=POS, extras={}), include_cls=True)
    with pytest.raises(BadInputError):
        positional_share(SEM, POS[:1])
    with pytest.raises(BadInputError):
        positional_share(SEM, POS, cls_terms=(torch.zeros(3), torch.zeros(3)))


def test_pooled_share_is_undefined_where_the_parts_have_opposite_signs_or_no_total():
    # the tiny ViT's Gradient x Input (docs/evaluation.md): the two sums nearly cancel, P / (S + P) would be -97048 %
    assert np.isnan(pooled_positional_share(np.array([-0.4304]), np.array([0.4306])))
    assert np.isnan(pooled_positional_share(np.array([1.0, -1.0]), np.array([0.5, -0.5])))  # S + P = 0
    assert np.isnan(pooled_positional_share(np.array([2.0]), np.array([-0.5])))  # S > 0, P < 0: share -33 %
    # same signs: a share in [0, 100], as before (LRP rows: DeiT, the tiny ViT)
    assert pooled_positional_share(np.array([3.0, 1.0]), np.array([1.0, 0.0])) == pytest.approx(20.0)
    assert pooled_positional_share(np.array([-3.0]), np.array([-1.0])) == pytest.approx(25.0)
    assert pooled_positional_share(np.array([0.0]), np.array([2.0])) == pytest.approx(100.0)
    both = pooled_positional_share(np.array([[3.0], [-0.4304]]), np.array([[1.0], [0.4306]]))  # vectorised
    assert both[0] == pytest.approx(25.0) and np.isnan(both[1])
