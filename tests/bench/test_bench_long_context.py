"""palrp_bench/bench/long_context.py (scripts/bench_long_context.py), the GPU measurement of docs/engine.md "Long contexts", in its CPU dry run: the same
code path on a scaled-down Llama-3.1-8B (rows, ratios, files, the relevance check), and its guards (an
out-of-memory error is a row, the time box skips what would overrun it)."""
import csv
import json

import torch

from palrp_bench.bench import long_context as bench

DRY = ["--device", "cpu", "--dtype", "float32", "--layers", "2", "--hidden", "64", "--vocab", "300", "--repeats", "1"]


def test_dry_run_measures_both_methods_with_and_without_checkpointing(tmp_path):
    rows = bench.main([*DRY, "--lengths", "24", "40", "--plain-at", "24", "--out", str(tmp_path)])
    assert [(r["length"], r["checkpoint"], r["method"]) for r in rows] == [
        (24, "none", "grad_x_input"), (24, "none", "pa_lrp"), (24, "layers", "grad_x_input"),
        (24, "layers", "pa_lrp"), (40, "layers", "grad_x_input"), (40, "layers", "pa_lrp")]
    assert all(r["status"] == "ok" and r["ms"] > 0 and r["tokens_per_s"] > 0 for r in rows)
    assert [r["ratio"] for r in rows if r["method"] == "grad_x_input"] == [1.0, 1.0, 1.0]
    saved = json.loads((tmp_path / "long_context.json").read_text())
    assert saved["layers"] == 2 and saved["hidden"] == 64 and saved["relevance_check"] < 1e-5
    with open(tmp_path / "long_context.csv") as f:
        assert len(list(csv.DictReader(f))) == 6
    cfg = bench.llama_config(bench.argparse.Namespace(hidden=0, layers=0, vocab=0, lengths=[131072]))
    assert (cfg.hidden_size, cfg.num_key_value_heads, cfg.intermediate_size, cfg.vocab_size) == (4096, 8, 14336, 128256)
    assert cfg.rope_parameters["rope_type"] == "llama3"


def test_out_of_memory_is_a_row_and_the_time_box_skips(tmp_path, monkeypatch):
    real = bench.run_once

    def failing(model, ids, method, checkpoint, args, device):
        if method == "pa_lrp":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, ids, method, checkpoint, args, device)

    monkeypatch.setattr(bench, "run_once", failing)
    # no time to spare: only the first length runs (nothing predicts it), the longer one is predicted and skipped
    rows = bench.main([*DRY, "--lengths", "24", "400", "--methods", "pa_lrp", "grad_x_input", "--plain-at",
                       "--time-box", "0", "--out", str(tmp_path)])
    assert [r["status"] for r in rows] == ["oom", "ok", "skipped", "skipped"]
    assert rows[0]["note"].startswith("CUDA out of memory") and rows[2]["note"].startswith("time box")
    assert rows[1]["ratio"] == 1.0
