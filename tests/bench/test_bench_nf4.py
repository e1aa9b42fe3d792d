"""palrp_bench/bench/nf4.py (``scripts/bench_nf4.py``; docs/planning.md "The NF4 cell"): one NF4 layer against its
dequantised copy, on a tiny shape on the CPU."""
import json

import pytest

pytest.importorskip("bitsandbytes")

from palrp_bench.bench import nf4  # noqa: E402


@pytest.mark.parametrize("backward", [False, True])
def test_the_dequantised_copy_computes_the_same_numbers_and_each_row_count_is_timed(tmp_path, capsys, backward):
    out = tmp_path / "nf4.json"
    argv = ["--shape", "tiny", "--rows", "1", "5", "--repeats", "1", "--warmup", "0", "--json", str(out)]
    assert nf4.main(argv + (["--backward"] if backward else [])) == 0
    data = json.loads(out.read_text())
    assert (data["in"], data["out"], data["device"]) == (64, 128, "cpu")
    assert data["nf4_bytes"] == 64 * 128 // 2 and data["dense_bytes"] == 64 * 128 * 2  # 4-bit codes vs bf16
    assert [r["rows"] for r in data["rows"]] == [1, 5]
    assert all(r["max_abs_difference"] == 0 and r["nf4_ms"] > 0 and r["dense_ms"] > 0 for r in data["rows"])
    printed = capsys.readouterr().out
    assert ("forward + input gradient" if backward else "forward;") in printed
    assert "| 5 | " in printed and "dequantising the weight alone" in printed
