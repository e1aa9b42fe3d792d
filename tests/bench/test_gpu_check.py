"""palrp_bench/bench/gpu_check.py (``scripts/gpu_check.py``, docs/rehearsal.md "GPU check"): a failing step is one
FAILED row and the others still run, the summary table's columns, the exit status, the refusal without CUDA (faked; nothing here runs CUDA), and the
suite step on a real pytest run."""
import argparse
import json
import sys
from pathlib import Path

import pytest

from palrp_bench.bench import gpu_check

REPO = Path(__file__).resolve().parents[2]
Row, OK, FAILED, SKIPPED = gpu_check.Row, gpu_check.OK, gpu_check.FAILED, gpu_check.SKIPPED


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_a_step_that_raises_or_exits_is_one_failed_row_and_the_others_still_run(tmp_path):
    ran = []

    def fine():
        ran.append("one")
        yield Row("one", "a", OK, per_sample_s=0.5)

    def raises_midway():
        yield Row("two", "b", OK)
        raise RuntimeError("boom in step two")

    def exits():
        ran.append("three")
        sys.exit(3)
        yield  # a generator, as every step is

    def never():
        raise AssertionError("a skipped step must not run")
        yield

    def last():
        ran.append("four")
        yield Row("four", "d", OK)

    timings = {}
    rows = gpu_check.run_steps([("one", fine), ("two", raises_midway), ("three", exits), ("five", never),
                                ("four", last)], skip=["five"], out=tmp_path, timings=timings)
    assert [(r.step, r.target, r.status) for r in rows] == [
        ("one", "a", OK), ("two", "b", OK), ("two", "-", FAILED), ("three", "-", FAILED), ("five", "-", SKIPPED),
        ("four", "d", OK)]
    assert ran == ["one", "three", "four"]
    assert rows[2].note == "RuntimeError: boom in step two" and rows[3].note == "exit 3"
    assert "Traceback" in Path(rows[2].log).read_text() and Path(rows[2].log).parent == tmp_path / "two"
    assert rows[4].note == "--skip"
    assert set(timings) == {"one", "two", "three", "four"}
    assert gpu_check.exit_status(rows) == 1
    assert gpu_check.exit_status([r for r in rows if r.status != FAILED]) == 0


def test_the_summary_table_has_its_columns_and_one_line_per_row(tmp_path):
    rows = [Row("rehearse", "deit_tiny_imagenet", OK, wall_s=12.0, per_sample_s=0.5, planned_s=0.25, peak_gib=2.0,
                projected_s=7200.0, note="2 samples", log=str(tmp_path / "rehearse" / "logs" / "x.log")),
            Row("bench", "-", FAILED, note="exit 1: a|b", log=str(tmp_path / "bench" / "bench.log")),
            Row("suite", "-", SKIPPED, note="--skip")]
    lines = gpu_check.summary_table(rows, tmp_path).splitlines()
    assert _cells(lines[0]) == ["step", "target", "status", "wall", "s / sample", "plan s / sample",
                                "measured / plan", "peak memory", "projected", "note", "log"]
    assert len(lines) == 2 + len(rows) and all(len(_cells(line)) == 11 for line in lines[2:])
    assert _cells(lines[2]) == ["rehearse", "deit_tiny_imagenet", "ok", "12.0 s", "0.500 s", "0.250 s", "2.00",
                                "2.0 GiB", "2.0 h", "2 samples", "rehearse/logs/x.log"]
    assert _cells(lines[3])[2] == "FAILED" and _cells(lines[3])[9] == "exit 1: a/b"
    assert _cells(lines[3])[10] == "bench/bench.log"


def test_rehearsal_measurements_map_to_ok_failed_or_skipped_rows():
    m = gpu_check.rehearse.Measured
    ok = gpu_check.measured_row(m("t", "ok", samples=20, load_model_s=3.0, per_sample_s=0.2, planned_sample_s=0.1,
                                  peak_rss_gib=5.0, peak_device_gib=9.0, wall_s=40.0, log="t.log"), "cuda")
    assert (ok.status, ok.per_sample_s, ok.planned_s, ok.peak_gib, ok.log) == (OK, 0.2, 0.1, 9.0, "t.log")
    assert "20 samples" in ok.note and "model load 3 s" in ok.note
    assert gpu_check.measured_row(m("t", "ok", per_sample_s=1.0, peak_rss_gib=5.0), "cpu").peak_gib == 5.0
    capped = gpu_check.measured_row(m("t", "capped", samples=4, per_sample_s=1.0), "cuda")
    assert capped.status == OK and "stopped at --max-minutes after 4" in capped.note
    assert gpu_check.measured_row(m("t", "capped"), "cuda").status == FAILED
    failed = gpu_check.measured_row(m("t", "failed (exit 1)", note="palrp-bench: error: no such file"), "cuda")
    assert failed.status == FAILED and "no such file" in failed.note
    assert gpu_check.measured_row(m("t", "skipped", note="needs about 30 GiB"), "cpu").status == SKIPPED


def test_without_cuda_it_stops_at_once_with_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gpu_check, "steps_for", lambda check: pytest.fail("no step may run without CUDA"))
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1
    assert "needs a CUDA device" in err and "--device cpu" in err
    assert not (tmp_path / "out").exists()


def test_with_cuda_present_the_steps_run_and_write_the_summary(monkeypatch, capsys, tmp_path):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # faked: nothing below touches CUDA
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "user-cache"))  # main points it at its own; restored
    monkeypatch.setattr(gpu_check, "environment", lambda args: {"started": "now", "gpu": "a faked GPU"})

    def broken():
        raise OSError("bench crashed")
        yield

    seen = {}

    def steps(check):
        seen["device"], seen["batch_size"] = check.args.device, check.args.batch_size
        return [("suite", lambda: iter([Row("suite", "tests", OK, note="3 passed")])), ("bench", broken)]

    monkeypatch.setattr(gpu_check, "steps_for", steps)
    out = tmp_path / "out"
    assert gpu_check.main(["--out", str(out)]) == 1
    assert seen == {"device": "cuda", "batch_size": "auto"}
    printed = capsys.readouterr().out
    assert "| suite | tests | ok |" in printed and "| bench | - | FAILED |" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["exit_status"] == 1 and [r["status"] for r in summary["rows"]] == [OK, FAILED]
    assert (out / "summary.md").read_text().count("\n| ") == 3  # the column names and the 2 rows
    assert (out / "bench" / "error.log").is_file() and (out / "environment.json").is_file()
    assert (out / "gpu_check.log").read_text().strip().endswith(str(out))


def test_the_environment_record_names_the_commit_and_the_libraries():
    info = gpu_check.environment(argparse.Namespace(device="cpu"))
    assert info["torch"].split("+")[0].count(".") == 2 and "transformers" in info and "commit" in info
    assert "gpu" not in info


def test_the_suite_runs_as_make_test_does(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(gpu_check, "pytest_row", lambda check, name, label, paths, extra_env=None:
                        calls.append((name, paths, extra_env)) or Row("suite", label, OK))
    check = argparse.Namespace(args=argparse.Namespace(tests=None))
    monkeypatch.setattr(gpu_check.platform, "machine", lambda: "x86_64")
    assert [r.status for r in gpu_check.suite_step(check)] == [OK, OK, OK]
    assert calls == [("tests", ["tests"], None),
                     ("numerics_avx2", gpu_check.numeric_tests(), {"ATEN_CPU_CAPABILITY": "avx2"}),
                     ("numerics_default", gpu_check.numeric_tests(), {"ATEN_CPU_CAPABILITY": "default"})]
    makefile = (REPO / "Makefile").read_text()
    for capability in ("avx2", "default"):
        assert (f"ATEN_CPU_CAPABILITY={capability} $(PY) -m pytest -q -n $(PYTEST_WORKERS) -p no:cacheprovider "
                "$(NUMERIC_TESTS)") in makefile
    assert gpu_check.numeric_tests() and all((REPO / p).is_dir() for p in gpu_check.numeric_tests())
    monkeypatch.setattr(gpu_check.platform, "machine", lambda: "aarch64")
    rows = list(gpu_check.suite_step(check))
    assert [r.status for r in rows] == [OK, SKIPPED, SKIPPED] and "aarch64" in rows[1].note


def test_the_make_target_calls_the_script():
    makefile = (REPO / "Makefile").read_text()
    phony = next(line for line in makefile.splitlines() if line.startswith(".PHONY:"))
    assert "gpu-check" in phony.split()
    assert "gpu-check: setup\n\t$(PY) scripts/gpu_check.py $(ARGS)\n" in makefile
    assert "gpu_check/" in (REPO / ".gitignore").read_text().splitlines()


def test_calibration_is_read_from_the_cost_file_calibrate_writes(tmp_path):
    from palrp_bench.planning.calibrate import Measurement, write_calibration

    def measurement(model, per_sample):
        return Measurement(model, "imagenet", "pa_lrp", "vit/float32/none", 5_000_000, 0.5, 0.5, 1.0, per_sample,
                           per_sample, 1, 2, 2, 197.0, 0.1, 2.0e9, 1.5e9)

    path = tmp_path / "cost.json"
    write_calibration(path, "cuda/A GPU", {"vit/float32/none": {"seconds_per_unit": 1e-3, "overhead_s": 0.01,
                                                                 "load_s_per_gparam": 1.0}},
                      [measurement("deit_tiny", 0.25)], "test")
    found, profiles = gpu_check._calibration_of(path, "deit_tiny")
    assert found["per_sample"] == 0.25 and found["peak_bytes"] == 2.0e9
    assert profiles["vit/float32/none"]["seconds_per_unit"] == 1e-3
    assert gpu_check._calibration_of(path, "deit_base") == (None, {})
    assert gpu_check._calibration_of(tmp_path / "missing.json", "deit_tiny") == (None, {})
    # one calibration per model: the first target of each model config and checkpoint
    assert [t.name for t in gpu_check._per_model(gpu_check.rehearse.TARGETS)] == [
        "tinyllama_imdb_csv", "llama2_7b_4bit_imdb", "llama2_7b_imdb", "tinyllama_mcqa", "llama3_8b_mcqa",
        "deit_tiny_imagenet", "deit_small_imagenet", "deit_base_imagenet"]


def test_the_bench_rows_it_finished_stay_when_it_dies_and_its_death_is_one_failed_row(monkeypatch, tmp_path):
    def fake_run(command, log, env, cwd=None):  # what bench_attribution.py --json leaves after one row, then dies
        assert command[command.index("--device") + 1] == "cuda" and "--preset" in command
        path = Path(command[command.index("--json") + 1])
        path.write_text(json.dumps({"preset": "llama2_7b", "dtype": "bfloat16", "reference": "grad_x_input",
                                    "rows": [{"family": "llama", "length": 512, "method": "pa_lrp", "ms": 162.0,
                                              "ratio": 1.57, "peak_mib": 2969.6}]}))
        log.write_text("command\ntorch.OutOfMemoryError: CUDA out of memory\n")
        return 1, 30.0

    monkeypatch.setattr(gpu_check, "_run", fake_run)
    args = argparse.Namespace(work=tmp_path, device="cuda", bench_args=None)
    rows = list(gpu_check.bench_step(gpu_check.Check(args, tmp_path / "out")))
    assert [(r.target, r.status) for r in rows] == [("llama 512 tokens pa_lrp", OK), ("-", FAILED)]
    assert rows[0].per_sample_s == pytest.approx(0.162) and rows[0].peak_gib == pytest.approx(2.9)
    assert "1.57x grad_x_input" in rows[0].note
    assert rows[1].note == "exit 1: torch.OutOfMemoryError: CUDA out of memory" and rows[1].wall_s == 30.0


def test_a_real_pytest_run_becomes_one_row_with_the_failing_test_named(tmp_path):
    tests = tmp_path / "test_sample.py"
    tests.write_text("import pytest\n\ndef test_passes():\n    assert True\n\n"
                     "def test_fails():\n    assert 1 == 2\n\n"
                     "@pytest.mark.skip(reason='x')\ndef test_skipped():\n    pass\n")
    check = gpu_check.Check(argparse.Namespace(work=tmp_path / "work", tests=None), tmp_path / "out")
    row = gpu_check.pytest_row(check, "tests", "tests", [str(tests)])
    assert row.status == FAILED and row.note.startswith("1 failed of 3: ") and "test_fails" in row.note
    assert Path(row.log) == tmp_path / "out" / "suite" / "tests.log" and "test_fails" in Path(row.log).read_text()
    tests.write_text("def test_passes():\n    assert True\n")
    row = gpu_check.pytest_row(check, "tests", "tests", [str(tests)])
    assert (row.status, row.note) == (OK, "1 passed, 0 skipped")
