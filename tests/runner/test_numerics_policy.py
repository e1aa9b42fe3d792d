"""The TF32 switch through the runner (docs/evaluation.md, "Numerics on GPUs"): a cell setting with each protocol's
default, applied while the job computes (selection included) and restored after it, recorded in every job's status
and in the manifest; resuming with another choice is refused."""
import json

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.evaluation.tasks.selftest import SelftestAdapter
from palrp_bench.numerics import tf32_state
from palrp_bench.app import run
from palrp_bench.runner.plan import plan_cells
from runner.harness import compose_cfg

SELFTEST = ("experiment=selftest", "task=selftest", "method=pa_lrp", "task.options.n=4", "runner.quiet=true",
            "runner.devices=[cpu]")


def test_each_protocol_has_its_tf32_default_and_only_a_change_enters_the_fingerprint(tmp_path):
    (official,) = plan_cells(compose_cfg(tmp_path, *SELFTEST))
    (corrected,) = plan_cells(compose_cfg(tmp_path, *SELFTEST, "protocol=corrected"))
    (explicit,) = plan_cells(compose_cfg(tmp_path, *SELFTEST, "protocol=corrected", "tf32=conv"))
    assert (official.tf32, corrected.tf32, explicit.tf32) == ("conv", "off", "conv")
    # conv is how every run computed before the switch existed: those run directories keep their fingerprint
    assert "tf32" not in official.settings() and corrected.settings()["tf32"] == "off"
    assert official.describe()["tf32"] == "conv" and corrected.describe()["tf32"] == "off"
    with pytest.raises(BadInputError, match="unknown tf32 'fast'") as info:
        plan_cells(compose_cfg(tmp_path, *SELFTEST, "tf32=fast"))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("protocol, flags", [("official", {"cudnn_conv": "tf32", "cuda_matmul": "ieee"}),
                                             ("corrected", {"cudnn_conv": "ieee", "cuda_matmul": "ieee"})])
def test_the_job_computes_under_the_cells_tf32_and_records_it(tmp_path, monkeypatch, protocol, flags):
    seen = []
    for name in ("evaluate", "correct"):
        real = getattr(SelftestAdapter, name)

        def spy(self, *args, _real=real, **kwargs):
            seen.append(tf32_state())
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(SelftestAdapter, name, spy)
    before = tf32_state()
    run(compose_cfg(tmp_path, *SELFTEST, f"protocol={protocol}"), out=open("/dev/null", "w"))
    assert seen and all(state == flags for state in seen)
    assert tf32_state() == before  # the process's flags are back
    (status,) = [json.loads(p.read_text()) for p in tmp_path.glob("cells/*/*/*/shard-*.status.json")]
    expected = {"device_kind": "cpu", "tf32": "conv" if protocol == "official" else "off", **flags}
    assert status["numerics"] == expected
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["numerics"] == [expected]


def test_resuming_with_another_tf32_is_refused(tmp_path):
    run(compose_cfg(tmp_path, *SELFTEST, "protocol=corrected"), out=open("/dev/null", "w"))
    with pytest.raises(BadInputError, match=r"other settings \(changed: tf32\)"):
        run(compose_cfg(tmp_path, *SELFTEST, "protocol=corrected", "tf32=conv"), out=open("/dev/null", "w"))
