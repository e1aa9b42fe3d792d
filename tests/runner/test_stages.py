"""Where a job's time goes (palrp_bench/stages.py): the stage clock counts every second once, and every job of a
run records its stage timings in its status, the manifest, its log line and the end-of-run summary."""
import json
import re
import threading
import time

import pytest

from palrp_bench.stages import STAGES, StageClock, describe_timings, measuring, stage, steady_split
from runner.harness import NO_GPU, run_cli


def test_a_nested_stage_pauses_the_one_around_it_so_no_second_counts_twice():
    clock = StageClock("cpu")
    start = clock.now()
    with measuring(clock):
        with stage("metrics"):
            time.sleep(0.02)
            with stage("forwards"):
                time.sleep(0.03)
            time.sleep(0.01)
        with stage("write"):
            pass
    wall = clock.now() - start
    assert clock.seconds["forwards"] >= 0.03 and clock.seconds["metrics"] >= 0.03
    assert clock.seconds["forwards"] < 0.03 + 0.02  # the metrics' own sleeps are not in it (generous for CI)
    assert 0 <= sum(clock.seconds.values()) <= wall
    with pytest.raises(ValueError, match="unknown stage 'loading'"):
        with clock.stage("loading"):
            pass


def test_stages_record_only_in_the_measuring_thread():
    clock = StageClock()
    with measuring(clock):
        worker = threading.Thread(target=lambda: stage("explain").__enter__())  # another thread: no clock, no-op
        worker.start()
        worker.join()
    with stage("explain"):  # outside measuring: nothing recorded
        time.sleep(0.01)
    assert clock.seconds == dict.fromkeys(STAGES, 0.0)


def test_the_line_gives_the_warm_up_and_each_stage_per_sample_after_it():
    timings = {"data_wait_s": 0.1, "explain_s": 2.0, "forwards_s": 4.0, "metrics_s": 0.2, "write_s": 0.1,
               "warmup_s": 3.0, "warmup_samples": 2, "total_s": 10.0, "samples": 6}
    samples, split = steady_split(timings)
    assert samples == 4 and split["total"] == pytest.approx(7.0 / 4) and split["other"] == pytest.approx(0.6 / 4)
    assert describe_timings(timings) == ("6 samples in 10.0 s, warm-up 3.0 s (2 samples); then 1.75 s per sample "
                                         "(4 samples): data wait 25.0 ms, explain 500.0 ms, forwards 1.00 s, "
                                         "metrics 50.0 ms, write 25.0 ms, other 150.0 ms")
    assert describe_timings(dict(timings, samples=2)).endswith("(2 samples); nothing after it")


def test_every_job_records_where_its_time_went_through_the_command_line(tmp_path):
    run_dir = tmp_path / "run"
    done = run_cli("model=tiny_vit", "task=synthetic_shapes", "method=grad_x_input", "task.options.n=3",
                   "runner.batch_size=1", "runner.devices=[cpu]", "runner.quiet=true", "runner.html=false",
                   f"run_dir={run_dir}", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 0, done.stderr[-2000:]
    (cell,) = json.loads((run_dir / "manifest.json").read_text())["cells"]
    (shard,) = cell["shards"]
    timings = shard["timings"]
    stages = [f"{name}_s" for name in STAGES]
    assert set(timings) == {"load_model_s", "load_data_s", "selection_s", *stages, "warmup_s", "warmup_samples",
                            "total_s", "samples"}
    assert all(timings[k] >= 0 for k in timings)
    assert (timings["samples"], timings["warmup_samples"]) == (3, 1)
    assert timings["explain_s"] > 0 and timings["forwards_s"] > 0  # two batches after the warm-up
    # the stages and the warm-up add up to at most the evaluation's wall time (each rounded to 1 ms)
    assert sum(timings[k] for k in stages) + timings["warmup_s"] <= timings["total_s"] + 0.007
    line = f"time of tiny_vit/synthetic_shapes/grad_x_input#0/1: {describe_timings(timings)}"
    assert line in done.stdout  # the end-of-run summary, one line per job
    assert re.search(r"grad_x_input#0/1: 3 samples in .*explain .*forwards .*", done.stderr)  # the job's log line
