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


# ------------------------------------------------------------------------------------------------ --quick
def test_quick_selects_one_target_per_paper_table():
    """Every table of the rehearsal's projection (Appendix F shares Table 4's key) has one designated target that
    prices it; the quick defaults run the suite and the hours step only, in their time boxes, with 64 samples timed
    after a first batch on CUDA; each default can be overridden."""
    targets = {t.name: t for t in gpu_check.rehearse.TARGETS}
    assert list(gpu_check.QUICK_TARGETS) == list(gpu_check.rehearse.TABLE_CELLS)
    for table, name in gpu_check.QUICK_TARGETS.items():
        assert table in targets[name].tables, (table, name)
    assert "table4+appendix_f" in gpu_check.QUICK_TARGETS  # Appendix F: the same DeiT run as Table 4
    args = gpu_check.parse_args(["--quick"])
    assert args.targets == gpu_check.quick_targets() and len(args.targets) == 5
    assert set(args.skip) == {"calibrate", "rehearse", "bench"} and args.box == gpu_check.QUICK_BOXES
    assert args.hours_samples - int(args.batch_size) >= 64
    assert sum(gpu_check.QUICK_BOXES.values()) <= 9 * 60
    check = gpu_check.Check(args, REPO / "gpu_check" / "stamp")
    assert [t.name for t in check.targets()] == [  # cheapest first: what a small target leaves goes to the large
        "deit_base_imagenet", "deit_base_imagenet_seg", "tinyllama_imdb_csv", "llama2_7b_imdb", "llama3_8b_mcqa"]
    assert check.scratch == REPO / "rehearsal" / "gpu_check" / "stamp"
    mine = gpu_check.parse_args(["--quick", "--device", "cpu", "--targets", "deit_tiny_imagenet_seg",
                                 "--box", "suite=10,hours=5.5", "--skip", "bench"])
    assert mine.targets == ["deit_tiny_imagenet_seg"] and mine.box == {"suite": 10.0, "hours": 5.5}
    assert mine.skip == ["bench"] and (mine.hours_samples, mine.batch_size) == (4, "2")
    full = gpu_check.parse_args([])
    assert full.skip == [] and full.box == {} and len(full.targets) == len(targets)
    with pytest.raises(SystemExit):
        gpu_check.parse_args(["--box", "suite"])


def test_the_suite_uses_the_cores_and_quick_runs_it_once(monkeypatch):
    monkeypatch.delenv("PYTEST_WORKERS", raising=False)
    assert gpu_check.suite_workers() == ["-n", "auto"]
    monkeypatch.setenv("PYTEST_WORKERS", "14")
    assert gpu_check.suite_workers() == ["-n", "14"]
    calls = []
    monkeypatch.setattr(gpu_check, "pytest_row", lambda check, name, label, paths, extra_env=None:
                        calls.append(name) or Row("suite", label, OK))
    check = argparse.Namespace(args=argparse.Namespace(tests=None, quick=True))
    assert [r.status for r in gpu_check.suite_step(check)] == [OK, SKIPPED, SKIPPED] and calls == ["tests"]


def test_a_command_is_stopped_at_its_time_box(tmp_path):
    log = tmp_path / "sleep.log"
    code, wall = gpu_check._run([sys.executable, "-c", "import time; time.sleep(60)"], log, {}, timeout=0.5)
    assert code == gpu_check.TIMED_OUT and wall < gpu_check.GRACE_S


def test_a_suite_stopped_at_its_box_reports_what_it_finished(tmp_path, monkeypatch):
    tests = tmp_path / "test_slow.py"
    tests.write_text("import time\n\ndef test_fast():\n    assert True\n\n"
                     "def test_slow():\n    time.sleep(60)\n")
    args = argparse.Namespace(work=tmp_path / "work", tests=None, quick=True, box={"suite": 12.0})
    check = gpu_check.Check(args, tmp_path / "out")
    check.deadline = check.clock() + 12.0  # pytest's start-up takes seconds on a loaded machine
    monkeypatch.setenv("PYTEST_WORKERS", "0")  # in one process (-n 0)
    row = gpu_check.pytest_row(check, "tests", "tests", [str(tests)])
    assert row.status == gpu_check.PARTIAL and row.wall_s < 12.0 + gpu_check.GRACE_S
    assert row.note.startswith("stopped at the 12 s time box: 1 passed") and row.note.endswith("so far"), row.note
    assert Path(row.log) == tmp_path / "out" / "suite.log"  # --quick: the one log that comes back


def test_the_hours_targets_share_the_time_box(monkeypatch, tmp_path):
    """Each target gets its fair share of what is left of the step's box (at least MIN_TARGET_S), what a fast
    target leaves goes to the next, and once less than MIN_TARGET_S is left the other targets are skipped rows."""
    clock = [0.0]
    caps = []

    def fake_run_target(target, args, work, out=None):
        caps.append((target.name, args.max_minutes * 60, args.grace_s))
        clock[0] += {"deit_tiny_imagenet": 60.0, "deit_tiny_imagenet_seg": 15.0}.get(target.name, 1.0)
        if target.name == "deit_tiny_imagenet_seg":  # stopped at its cap within the first batch
            return gpu_check.rehearse.Measured(target.name, "capped", samples=8, per_sample_s=1.0, wall_s=20.0)
        return gpu_check.rehearse.Measured(target.name, "ok", samples=72, per_sample_s=0.1, steady_sample_s=0.1,
                                           warmup_samples=8, wall_s=5.0, log="")

    monkeypatch.setattr(gpu_check.rehearse, "run_target", fake_run_target)
    monkeypatch.setattr(gpu_check.bench_gpu, "target_flops",
                        lambda target, work: {"total": 1.0e9, "explain": 4.0e8, "forwards": 6.0e8})
    args = gpu_check.parse_args(["--quick", "--device", "cpu", "--targets",
                                 "deit_tiny_imagenet_seg,deit_tiny_imagenet,deit_small_imagenet",
                                 "--work", str(tmp_path / "work")])
    check = gpu_check.Check(args, tmp_path / "out")
    check.clock = lambda: clock[0]
    check.deadline = 90.0
    rows = list(gpu_check.hours_step(check))
    assert caps == [("deit_tiny_imagenet", 30.0, gpu_check.GRACE_S),  # a third of 90 s
                    ("deit_tiny_imagenet_seg", 20.0, gpu_check.GRACE_S)]  # half of 30 s is below MIN_TARGET_S
    by_target = {r.target: r for r in rows}
    assert by_target["deit_tiny_imagenet"].status == OK and by_target["deit_small_imagenet"].status == SKIPPED
    capped = by_target["deit_tiny_imagenet_seg"]  # the box's decision: partial, not a failure
    assert capped.status == gpu_check.PARTIAL and "stopped at its share of the time box (20 s)" in capped.note
    assert "time box ran out" in by_target["deit_small_imagenet"].note
    assert (tmp_path / "out" / "hours.md").is_file() and (tmp_path / "out" / "rehearse.log").is_file()
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["hours.md", "rehearse.log"]


def test_quick_leaves_a_few_small_files_written_as_it_goes(monkeypatch, tmp_path):
    """Without a GPU: the summary is rewritten after every row (a step that dies later loses nothing), the
    checkpoints and data are built beside the suite, and ``--out`` holds at most 8 files, none in a subfolder."""
    built = []
    monkeypatch.setattr(gpu_check.rehearse, "pipeline_overrides", lambda target, work, dtype="config":
                        built.append(target.name) or [])
    monkeypatch.setattr(gpu_check, "environment", lambda args: {"started": "now", "cpu": "a CPU", "device": "cpu"})
    monkeypatch.setenv("PALRP_CACHE_DIR", str(tmp_path / "user-cache"))  # main points it at the check's own
    out = tmp_path / "out"
    seen = []

    def steps(check):
        def suite():
            yield Row("suite", "tests", OK, note="3 passed", log=str(check.returned("suite.log")))
            seen.append((out / "summary.md").read_text())  # written before the next row comes
            check.returned("suite.log").write_text("3 passed\n")

        def hours():
            assert check.prebuild.wait(10) and check.remaining() is not None
            yield Row("hours", "deit_base_imagenet", OK, per_sample_s=0.1)
            raise RuntimeError("a late failure")

        return [("suite", suite), ("hours", hours)]

    monkeypatch.setattr(gpu_check, "steps_for", steps)
    assert gpu_check.main(["--quick", "--device", "cpu", "--out", str(out), "--work", str(tmp_path / "work")]) == 1
    assert "| suite | tests | ok |" in seen[0] and "still running" in seen[0]
    assert built == ["deit_base_imagenet", "deit_base_imagenet_seg", "tinyllama_imdb_csv"]  # 7B / 8B: too large here
    files = sorted(p.name for p in out.iterdir())
    assert set(files) <= set(gpu_check.QUICK_FILES) and len(files) <= 8 and all(p.is_file() for p in out.iterdir())
    assert all(p.stat().st_size < 16 * 1024 ** 2 for p in out.iterdir())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["finished"] and [r["status"] for r in summary["rows"]][-2:] == [OK, FAILED]
    assert "RuntimeError: a late failure" in (out / "errors.log").read_text()
    assert "| hours | deit_base_imagenet | ok |" in (out / "summary.md").read_text()


def test_a_file_that_comes_back_is_capped_at_its_end(tmp_path):
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 100 + b"the end")
    gpu_check._cap_file(path, limit=20)
    text = path.read_text()
    assert text.endswith("x" * 13 + "the end") and text.startswith("[first 87 bytes left out")
