"""scripts/make_heatmap_figure.py renders image | AttnLRP | PE only | PA-LRP for any twin-supported ViT."""
import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "make_heatmap_figure.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("make_heatmap_figure", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
