"""torchvision ViTs as timm models: logit parity with torchvision's own forward, the twin explains them, and the
loader's one-line errors (no download here)."""
import pytest
import torch
from torchvision.models.vision_transformer import VisionTransformer as TvVit

from palrp_bench import explain
from palrp_bench.errors import BadInputError, MissingDataError
from palrp_bench.models.torchvision_vit import load_torchvision_vit, timm_from_torchvision, weights_file


def tiny_torchvision_vit(seed=0):
    torch.manual_seed(seed)
    model = TvVit(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=40, num_classes=5)
    with torch.no_grad():
        for p in model.parameters():  # torchvision zero-initialises some tensors: randomise every one
            p.copy_(0.3 * torch.randn_like(p))
    return model.double().eval()


def test_logits_equal_torchvision():
    tv = tiny_torchvision_vit()
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    model = timm_from_torchvision(tv)
    with torch.no_grad():
        assert torch.allclose(model(x), tv(x), atol=1e-12, rtol=0)
    assert model.pretrained_cfg["mean"] == (0.485, 0.456, 0.406)
    rel = explain(model, x, method="attnlrp_gamma_b4")  # the twin takes it
    assert rel.scores.shape == (3, 32, 32)
    with torch.no_grad():
        assert torch.equal(rel.target, tv(x).argmax(-1))


def test_refusals_and_missing_weights(tmp_path, monkeypatch):
    with pytest.raises(BadInputError, match="expected a torchvision VisionTransformer"):
        timm_from_torchvision(torch.nn.Linear(2, 2))
    with pytest.raises(BadInputError, match="unknown torchvision model"):
        load_torchvision_vit("vit_q_99.NOPE")
    with pytest.raises(MissingDataError, match="does not exist"):
        load_torchvision_vit("vit_b_16.IMAGENET1K_V1", checkpoint=str(tmp_path / "missing.pth"))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    assert weights_file("vit_b_16.IMAGENET1K_V1") == tmp_path / "checkpoints" / "vit_b_16-c867db91.pth"
    bad = tmp_path / "bad.pth"
    torch.save({"x": torch.zeros(1)}, bad)
    with pytest.raises(MissingDataError, match="cannot load"):
        load_torchvision_vit("vit_b_16.IMAGENET1K_V1", checkpoint=str(bad))
