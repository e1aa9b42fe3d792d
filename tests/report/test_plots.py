"""Report figures checked through matplotlib's objects (no golden images): colour maps with zero transparent or
neutral, one shared scale and colour bar per sample, task-specific galleries, curve bands, distinct line styles and
the table number in the legend."""
import json

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import CenteredNorm

from palrp_bench.report.plots import curve_figure, gallery_figure, map_style, mean_band, normalise
from palrp_bench.rundir import explanation_file

matplotlib.use("Agg", force=True)
STEPS = np.round(np.linspace(0, 1, 11), 10)


def _cell(tmp_path, task, method, kind, samples):
    cdir = tmp_path / "cells" / "m" / task / method
    (cdir / "explanations").mkdir(parents=True)
    (cdir / "cell.json").write_text(json.dumps({"settings": {"task": {"kind": kind}}}))
    for sid, arrays in samples.items():
        np.savez_compressed(explanation_file(cdir, sid), sample_id=np.array(sid), **arrays)
    return cdir


def _vision_cells(tmp_path, task, kind):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (3, 8, 8)).astype(np.uint8)
    mask = np.zeros((8, 8), np.uint8)
    mask[2:6, 2:6] = 1
    relu = np.maximum(rng.normal(size=(8, 8)), 0)
    return {method: _cell(tmp_path, task, method, kind,
                          {"s0": {"scores": scale * relu, "image": image, "mask": mask}})
            for method, scale in (("attnlrp", 1.0), ("pa_lrp", 50.0))}


def _map_images(fig):
    return [im for ax in fig.axes for im in ax.images if im.get_cmap().name.endswith("zero_transparent")]


def test_non_negative_maps_use_a_sequential_map_with_transparent_zero_and_one_scale(tmp_path):
    fig = gallery_figure(_vision_cells(tmp_path, "shapes", "image_classification"), ["s0"], "m / shapes",
                         "image_classification")
    maps = _map_images(fig)
    assert len(maps) == 2  # one per method, drawn over the image
    for im in maps:
        assert im.get_cmap()(im.norm(0.0))[3] == 0.0  # zero relevance paints nothing over the image
        assert (im.norm.vmin, im.norm.vmax) == (0.0, 1.0)  # the same scale for every method of the sample
    # maps 50x apart look the same once each is divided by its max |value| (what the evaluation is invariant to)
    np.testing.assert_allclose(maps[0].get_array(), maps[1].get_array())
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and "max |relevance|" in bars[0].get_ylabel()
    assert bars[0].get_ylim() == pytest.approx((0.0, 1.0))
    inputs = [ax for ax in fig.axes if ax.get_title() == "input"]
    assert len(inputs) == 1 and inputs[0].images[0].get_array().shape == (8, 8, 3)


def test_segmentation_gallery_outlines_what_table_5_scores(tmp_path):
    seg = gallery_figure(_vision_cells(tmp_path, "shapes_seg", "image_segmentation"), ["s0"], "m / shapes_seg",
                         "image_segmentation")
    cls = gallery_figure(_vision_cells(tmp_path, "shapes", "image_classification"), ["s0"], "m / shapes",
                         "image_classification")
    contours = lambda fig: sum(len(ax.collections) for ax in fig.axes if ax.images)  # noqa: E731
    assert contours(seg) == 4 and contours(cls) == 0  # per method: threshold + ground-truth outline
    assert "map > mean" in seg._suptitle.get_text() and "predicted class" in cls._suptitle.get_text()


def test_signed_maps_use_a_diverging_map_centred_at_zero(tmp_path):
    tokens = np.array(["<s>", "great", "film"])
    cells = {m: _cell(tmp_path, "sent", m, "text_classification",
                      {"s0": {"scores": np.array(s, float), "tokens": tokens}})
             for m, s in (("attnlrp", [0.0, 3.0, -1.0]), ("pa_lrp", [0.0, 0.5, 0.25]))}
    fig = gallery_figure(cells, ["s0"], "m / sent", "text_classification")
    (bar,) = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert bar.get_ylim() == pytest.approx((-1.0, 1.0))  # one symmetric scale for both methods of the sample
    (ax,) = [ax for ax in fig.axes if ax.get_title() == "attnlrp"]
    boxes = {t.get_text(): t.get_bbox_patch().get_facecolor() for t in ax.texts if t.get_bbox_patch() is not None}
    assert boxes["<s>"][:3] == pytest.approx(matplotlib.colormaps["RdBu_r"](0.5)[:3], abs=0.01)  # zero is neutral
    assert boxes["great"][0] > boxes["great"][2] and boxes["film"][2] > boxes["film"][0]  # red up, blue down
    cmap, norm = map_style([normalise([-1.0, 2.0])], over_image=True)
    assert isinstance(norm, CenteredNorm) and norm.vcenter == 0.0 and (norm.vmin, norm.vmax) == (-1.0, 1.0)
    assert cmap(norm(0.0))[3] == 0.0 and cmap(norm(1.0))[3] > 0.5  # over an image the centre is transparent


def _curve_rows(method, levels):
    return [{"method": method, "sample_id": f"s{i}", "metric": "ac", "variant": "pruning", "step": x,
             "value": lvl * (1 - x / 2)} for i, lvl in enumerate(levels) for x in STEPS]


def test_curves_have_bands_distinct_styles_and_the_table_number_in_the_legend():
    curves = pd.DataFrame(_curve_rows("attnlrp", [0.6, 0.8, 0.9]) + _curve_rows("pa_lrp", [0.6, 0.8, 0.9])
                          + _curve_rows("pe_only", [0.5, 0.5, 0.5]))
    numbers = pd.DataFrame({"method": ["attnlrp", "pa_lrp", "pe_only"], "metric": "auac", "variant": "pruning",
                            "value": [0.123, 0.456, 0.789]})  # read from metrics.csv, never recomputed
    fig = curve_figure(curves, numbers, "m / t: ac (pruning)")
    (ax,) = fig.axes
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 3
    lines = ax.get_lines()
    assert len({(ln.get_linestyle(), ln.get_marker()) for ln in lines}) == 3  # equal curves stay distinguishable
    np.testing.assert_allclose(lines[0].get_ydata(), lines[1].get_ydata())
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["attnlrp (auac 0.123)", "pa_lrp (auac 0.456)", "pe_only (auac 0.789)"]
    # the band of samples that agree collapses onto the mean; a spread gives a band around it
    verts = bands[2].get_paths()[0].vertices
    assert np.ptp(verts[:, 1][np.isclose(verts[:, 0], 0.0)]) == pytest.approx(0.0)
    mean, low, high = mean_band(np.array([[0.6, 0.3], [0.8, 0.4], [0.9, 0.45]]), 0.95)
    assert np.all(low < mean) and np.all(mean < high) and high[0] <= 0.9  # clipped to the samples' range


@pytest.mark.parametrize("curve, variant, x, y", [
    ("ac", "generation", "fraction of tokens kept (most relevant first, the rest UNK)",
     "AC: probability of the tracked output"),
    ("mse", "pruning", "fraction of tokens removed (least relevant first, replaced by UNK)",
     "MSE: squared change of the tracked logit"),
    ("agreement", "negative", "fraction of pixels removed (least relevant first)",
     "agreement with the original prediction (share of images)"),
])
def test_curve_axes_say_what_the_fraction_counts_and_what_is_measured(curve, variant, x, y):
    rows = pd.DataFrame([{**r, "metric": curve, "variant": variant} for r in _curve_rows("pa_lrp", [0.5, 0.6])])
    (ax,) = curve_figure(rows, None, "m / t").axes
    assert (ax.get_xlabel(), ax.get_ylabel()) == (x, y)


def test_each_method_band_has_its_own_colour_across_plots():
    """Twelve methods (the AttnLRP table's rows): more than matplotlib's default cycle of ten colours, yet every
    line and band of a method has one colour, no other method's, and the same one in every plot."""
    from matplotlib.colors import to_rgba

    from palrp_bench.report.plots import method_colours

    methods = [f"method_{i:02d}" for i in range(12)]
    colours = method_colours(methods)
    rows = pd.DataFrame([r for m in methods for r in _curve_rows(m, [0.5, 0.7])])
    (ax,) = curve_figure(rows, None, "m / t", colours=colours).axes
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    band_colours = [tuple(np.round(b.get_facecolor()[0][:3], 6)) for b in bands]
    line_colours = [tuple(np.round(to_rgba(ln.get_color())[:3], 6)) for ln in ax.get_lines()]
    assert len(set(band_colours)) == 12 and band_colours == line_colours
    (other,) = curve_figure(rows[rows["method"].isin(methods[5:])], None, "m / t", colours=colours).axes
    assert [tuple(np.round(to_rgba(ln.get_color())[:3], 6)) for ln in other.get_lines()] == line_colours[5:]
