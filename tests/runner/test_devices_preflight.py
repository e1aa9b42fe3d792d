"""Device resolution (one worker per device, CPU fallback); the pre-run check of what is missing is tested in
tests/planning/test_preflight.py."""
import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.runner.devices import resolve_devices


def test_auto_uses_every_gpu_or_falls_back_to_cpu():
    assert resolve_devices(["auto"], n_cuda=0).devices == ("cpu",)
    assert resolve_devices(["auto"], n_cuda=0).cpu_by_fallback
    assert resolve_devices(["auto"], n_cuda=2).devices == ("cuda:0", "cuda:1")
    assert resolve_devices(["cuda"], n_cuda=3).n_workers == 3
    assert resolve_devices(["0", "cuda:1"], n_cuda=2).devices == ("cuda:0", "cuda:1")
    plan = resolve_devices(["cpu", "cpu"], n_cuda=0)
    assert plan.devices == ("cpu", "cpu") and not plan.cpu_by_fallback


@pytest.mark.parametrize("spec,match", [(["cuda"], "no CUDA device is visible"), (["cuda:1"], "only 1 CUDA"),
                                        (["tpu"], "unknown device"), ([], "empty")])
def test_impossible_devices_are_one_line_errors(spec, match):
    with pytest.raises(BadInputError, match=match) as err:
        resolve_devices(spec, n_cuda=1 if spec == ["cuda:1"] else 0)
    assert "\n" not in str(err.value)
