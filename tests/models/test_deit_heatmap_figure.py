"""palrp_bench/heatmap_figure.py (``scripts/make_heatmap_figure.py``) renders image | AttnLRP | PE only | PA-LRP for
any twin-supported ViT."""
import pytest
import torch


@pytest.fixture(scope="module")
def script():
    from palrp_bench import heatmap_figure

    return heatmap_figure


def test_renders_a_figure_from_a_tensor_of_images(script, tmp_path):
    import matplotlib.image

    images = torch.rand(2, 3, 40, 50)  # any size: resized to the model's 64x64 input
    torch.save(images, tmp_path / "imgs.pt")
    out = tmp_path / "fig.png"
    assert script.main(["--model", "random", "--images", str(tmp_path / "imgs.pt"), "--n", "2", "--out", str(out)]) == 0
    png = matplotlib.image.imread(out)
    assert png.ndim == 3 and png.shape[0] > 200 and png.shape[1] > png.shape[0], "2 rows x 4 columns"


def test_columns_are_the_methods_maps(script):
    model = script.random_tiny_vit()
    size, mean, std, labels = script.model_input(model)
    raw, pixels = script.prepare([torch.rand(3, 64, 64)], size, mean, std)
    assert raw.shape == (1, 3, 64, 64) and labels is None
    assert torch.allclose(pixels * torch.tensor(std).view(1, 3, 1, 1) + torch.tensor(mean).view(1, 3, 1, 1), raw,
                          atol=1e-6)


def test_user_errors_exit_cleanly(script, tmp_path, capsys):
    assert script.main(["--model", "random", "--images", str(tmp_path / "nope"), "--out", str(tmp_path / "x.png")]) == 2
    assert "do not exist" in capsys.readouterr().err
    assert script.main(["--model", "random", "--n", "0"]) == 2


def test_samples_pick_embedded_images_by_index(script, tmp_path, capsys):
    from palrp_bench.data.synthetic_vision import make_synthetic_vision

    pool = make_synthetic_vision(3, split="test")
    images, names = script.load_images(None, 4, [2, 0])
    assert names == [pool[2].sample_id, pool[0].sample_id]
    assert torch.equal(images, torch.stack([pool[2].image, pool[0].image]))
    assert script.main(["--model", "random", "--samples", "1,x", "--out", str(tmp_path / "x.png")]) == 2
    assert "--samples" in capsys.readouterr().err
    torch.save(torch.rand(1, 3, 64, 64), tmp_path / "imgs.pt")
    assert script.main(["--model", "random", "--images", str(tmp_path / "imgs.pt"), "--samples", "0",
                        "--out", str(tmp_path / "y.png")]) == 2
    assert "cannot be combined" in capsys.readouterr().err


def test_maps_share_one_scale_per_image_with_the_reports_colour_map(script, tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from palrp_bench.report.plots import SEQUENTIAL_CMAP

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    raw = torch.rand(2, 3, 8, 8)
    maps = {method: torch.rand(2, 1, 8, 8) * (k + 1) for k, (method, _) in enumerate(script.COLUMNS)}
    script.render(raw, maps, ["a", "b"], "t", tmp_path / "f.png", None)
    (fig,) = figures
    grid = [[ax for ax in fig.axes if ax.get_subplotspec().rowspan.start == i] for i in range(2)]
    for i, row in enumerate(grid):
        images = [ax.get_images()[0] for ax in row[1:1 + len(script.COLUMNS)]]
        assert all(im.get_cmap().name == SEQUENTIAL_CMAP for im in images)
        assert all((im.norm.vmin, im.norm.vmax) == (0.0, 1.0) for im in images)
        largest = max(float(maps[m][i].max()) for m, _ in script.COLUMNS)
        for im, (method, _) in zip(images, script.COLUMNS):  # one scale per image: the largest map of any method
            assert abs(float(im.get_array().max()) - float(maps[method][i].max()) / largest) < 1e-6
        assert getattr(row[-1], "_colorbar", None) is not None  # a colour bar per image
