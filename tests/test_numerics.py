"""palrp_bench.numerics: the device kind and the TF32 switch (docs/evaluation.md, "Numerics on GPUs")."""
import pytest
import torch

from palrp_bench.errors import BadInputError
from palrp_bench.numerics import PROTOCOL_TF32, device_kind, resolve_tf32, tf32_mode, tf32_state


def test_each_protocol_has_its_tf32_default_and_bad_values_are_one_line():
    assert resolve_tf32(None, "official") == "conv"  # PyTorch's defaults, as the official code ran
    assert resolve_tf32(None, "corrected") == "off"
    assert resolve_tf32("off", "official") == "off" and resolve_tf32("conv", "corrected") == "conv"
    assert dict(PROTOCOL_TF32) == {"official": "conv", "corrected": "off"}
    with pytest.raises(BadInputError, match="unknown tf32 'on'") as info:
        resolve_tf32("on")
    assert "\n" not in str(info.value) and "conv, off" in info.value.fix


@pytest.mark.parametrize("choice, conv, matmul", [("conv", "tf32", "ieee"), ("off", "ieee", "ieee")])
def test_tf32_mode_sets_the_flags_inside_and_restores_them(choice, conv, matmul):
    """The flags are process-wide and settable without a GPU: inside the block they say what the choice means,
    after it they are back to what they were, also when the block raises."""
    before = tf32_state()
    with tf32_mode(choice) as inside:
        assert inside == tf32_state() == {"cudnn_conv": conv, "cuda_matmul": matmul}
        assert torch.backends.cudnn.allow_tf32 is (conv == "tf32")  # what the legacy flag reports
        assert torch.backends.cuda.matmul.allow_tf32 is False
    assert tf32_state() == before
    with pytest.raises(RuntimeError, match="inside"):
        with tf32_mode(choice):
            raise RuntimeError("inside")
    assert tf32_state() == before
    with pytest.raises(BadInputError):
        with tf32_mode("fast"):
            pass
    assert tf32_state() == before


def test_device_kind(monkeypatch):
    assert device_kind("cpu") == device_kind(torch.device("cpu")) == "cpu"
    assert device_kind("meta") == "meta"
    names = {0: "NVIDIA H100 80GB HBM3", 1: "NVIDIA A100-SXM4-80GB"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: names[index])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    assert device_kind("cuda:0") == "cuda/NVIDIA H100 80GB HBM3"
    assert device_kind(torch.device("cuda", 1)) == device_kind("cuda") == "cuda/NVIDIA A100-SXM4-80GB"


def test_a_process_on_the_newer_fp32_precision_flags_keeps_them(monkeypatch):
    """torch >= 2.9 refuses to read the legacy allow_tf32 flags once the newer per-backend flags were set: the switch
    then sets and restores the newer ones (in a child process, so this one keeps the legacy flags)."""
    import subprocess
    import sys

    code = ("import torch\n"
            "from palrp_bench.numerics import tf32_mode, tf32_state\n"
            "torch.backends.cudnn.conv.fp32_precision = 'ieee'\n"
            "before = (torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision)\n"
            "with tf32_mode('conv') as inside:\n"
            "    assert inside == {'cudnn_conv': 'tf32', 'cuda_matmul': 'ieee'}, inside\n"
            "    assert torch.backends.cudnn.conv.fp32_precision == 'tf32'\n"
            "assert (torch.backends.cudnn.conv.fp32_precision, torch.backends.cuda.matmul.fp32_precision) == before\n"
            "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
