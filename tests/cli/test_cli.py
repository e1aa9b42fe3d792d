"""The ``palrp-bench`` command: one-line errors with non-zero exit, plan mode, multirun into one run dir,
report mode (issue "Command line", "Bad input")."""
import os
import re
from pathlib import Path

import pytest

from palrp_bench import catalog
from palrp_bench.cli import check_overrides, defer_keys_of_swept_groups
from palrp_bench.errors import BadInputError
from runner.harness import NO_GPU, read_results, run_cli


@pytest.mark.parametrize("argv,match", [
    (["model=llama9"], "unknown model 'llama9' -- did you mean tinyllama, llama3_8b or llama2_7b\\? every model: "
                       "palrp-bench --help"),
    (["metric=nlp"], "unknown metric 'nlp' -- use one of: attnlrp_perturbation, .*vision_perturbation$"),
    (["method=attnlrp,foo"], "unknown method 'foo'"),
    (["runner.batchsize=4"], "unknown config key 'runner.batchsize' -- keys of runner: batch_size"),
    (["task.path=/data/x.csv"], "task.path is set but no task is selected -- add task=<name>"),
    (["model=llama3_8b", "model.sorce=x"], "unknown config key 'model.sorce'"),
])
def test_command_line_mistakes_are_caught_before_hydra(argv, match):
    with pytest.raises(BadInputError, match=match) as err:
        check_overrides(argv)
    assert "\n" not in str(err.value)


def test_valid_overrides_pass_the_check():
    check_overrides(["-m", "model=llama3_8b", "task=mcqa", "method=attnlrp,pe_only,pa_lrp", "task.options.x=1",
                     "hydra/launcher=submitit_slurm", "hydra.launcher.partition=gpu", "runner.devices=[0,1]",
                     "+experiment=table1", "report.confidence=0.9"])


def test_keys_of_a_swept_group_are_deferred_to_each_job():
    argv = ["--multirun", "task=synthetic_sva,synthetic_ra", "task.options.n=12", "model.dtype=float64",
            "method=attnlrp,pa_lrp", "method.rules=x", "runner.max_samples=3"]
    assert defer_keys_of_swept_groups(argv) == [
        "--multirun", "task=synthetic_sva,synthetic_ra", "task.options.n=choice(12)", "model.dtype=float64",
        "method=attnlrp,pa_lrp", "method.rules=choice(x)", "runner.max_samples=3"]
    assert defer_keys_of_swept_groups(argv[1:]) == argv[1:]          # a single run is Hydra's as written
    assert defer_keys_of_swept_groups(["--multirun", "task=a", "task.options.n=1,2"]) == \
        ["--multirun", "task=a", "task.options.n=1,2"]


def test_multirun_sets_a_key_inside_the_swept_group(tmp_path):
    """Hydra alone fails here with an AssertionError traceback: the multirun's base config has no task node."""
    done = run_cli("-m", "model=tiny_llama_evidence", "task=synthetic_sva,synthetic_ra", "task.options.n=12",
                   "method=attnlrp", "mode=plan", f"run_dir={tmp_path / 'run'}", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 0, done.stderr[-1500:]
    assert "Traceback" not in done.stderr
    planned = re.findall(r"tiny_llama_evidence\s+(synthetic_\w+)\s+attnlrp\s+<=(\d+)", done.stdout)
    assert planned == [("synthetic_sva", "12"), ("synthetic_ra", "12")], done.stdout


def _one_line_error(done, code=2):
    """The error is one line, the last one on stderr, with no traceback. Before a run starts it is all stderr holds;
    once jobs run, the log lines and the progress bar (also on stderr) come before it."""
    assert done.returncode == code, (done.returncode, done.stderr[-1500:])
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("palrp-bench: error: ")]
    assert len(errors) == 1 and lines[-1] == errors[0] and "Traceback" not in done.stderr, done.stderr
    return errors[0]


def test_unknown_model_exits_2_with_one_line(tmp_path):
    line = _one_line_error(run_cli("model=tinylama", cwd=tmp_path))
    head = "palrp-bench: error: unknown model 'tinylama' -- did you mean "
    tail = "? every model: palrp-bench --help (your own checkpoint: model=hf model.source=<folder or hub id>)"
    assert line.startswith(head) and line.endswith(tail), line
    first, _, rest = line[len(head):-len(tail)].partition(", ")
    suggested = [first, *rest.split(" or ")]   # the closest names, the closest first
    assert first == "tinyllama" and len(suggested) == 3 and set(suggested) <= set(catalog.available("model"))
    assert not (tmp_path / "runs").exists()
    help_text = run_cli("--help", cwd=tmp_path).stdout  # where the error points: every model by name
    assert "tinyllama" in help_text and "tiny_llama_cls" in help_text and "deit_base" in help_text


@pytest.mark.parametrize("args,line", [
    (["-m", "task=synthetic_sentiment", "method=[attnlrp,pa_lrp]", "task.path=my data"],
     "method=[attnlrp,pa_lrp]: a method takes one name (a list would merge the options into one run) -- run one job "
     "per method with -m: palrp-bench -m task=synthetic_sentiment method=attnlrp,pa_lrp 'task.path=my data'"),
    (["model=[tiny_vit,tiny_llama_cls]"], "run one job per model with -m: palrp-bench -m model=tiny_vit,tiny_llama_cls"),
    (["experiment=[table1]"], "experiment=[table1]: a experiment takes one name, not a list -- write experiment=table1"),
    (["method=[attnlrp,foo]"], "unknown method 'foo'"),  # every name is checked first
    (["model=tiny_llama_cls", "method=attnlrp,pa_lrp"],
     "method=attnlrp,pa_lrp gives several values, which run one job each only with -m -- sweep with: palrp-bench -m "
     "model=tiny_llama_cls method=attnlrp,pa_lrp"),
    (["runner.devices=0,1"], "sweep with: palrp-bench -m runner.devices=0,1; for one list value write "
                             "runner.devices=[0,1]"),
])
def test_several_values_where_one_run_takes_one_are_refused_with_the_sweep_command(args, line):
    with pytest.raises(BadInputError) as err:
        check_overrides(args)
    assert line in str(err.value) and "\n" not in str(err.value)


def test_a_list_of_methods_is_refused_and_the_suggested_sweep_runs_both(tmp_path):
    """Hydra alone runs `method=[attnlrp,pa_lrp]` as pa_lrp only (a list merges the options), exit 0."""
    import shlex

    args = ["experiment=selftest", "task=selftest", "task.options.n=3", "runner.quiet=true",
            f"run_dir={tmp_path / 'r'}"]
    line = _one_line_error(run_cli(*args, "method=[attnlrp,pa_lrp]", cwd=tmp_path))
    assert os.listdir(tmp_path) == []  # nothing written
    command = shlex.split(line.split("run one job per method with -m: ", 1)[1])
    assert command[:2] == ["palrp-bench", "-m"] and "method=attnlrp,pa_lrp" in command
    done = run_cli(*command[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert set(read_results(tmp_path / "r").method) == {"attnlrp", "pa_lrp"}
    line = _one_line_error(run_cli(*args, "method=attnlrp,pa_lrp", cwd=tmp_path))  # Hydra's "Ambiguous value"
    assert line.endswith("sweep with: " + shlex.join(["palrp-bench", "-m", *args, "method=attnlrp,pa_lrp"]))


@pytest.mark.parametrize("args,match", [
    (["protocol=corected"], "protocol: 'corected' is not an allowed value -- use one of: official, corrected"),
    (["-m", "protocol=official,corected"], "protocol: 'corected' is not an allowed value"),
    (["runner.forward_batch_size=abc"], "runner.forward_batch_size: 'abc' is not an integer"),
    (["model=llama3_8b", "model.dtype=bf16"], "model.dtype: 'bf16' is not an allowed value -- use one of: float32"),
    (["runner.quiet=maybe"], "runner.quiet: 'maybe' is not a boolean -- use runner.quiet=true or runner.quiet=false"),
    (["aggregation=eq12"], "aggregation: 'eq12' is not an allowed value -- use one of: official, eq11"),
])
def test_mistyped_values_are_one_line_naming_the_allowed_values(tmp_path, args, match):
    with pytest.raises(BadInputError, match=re.escape(match)):
        check_overrides(args)
    done = run_cli(*args, cwd=tmp_path)
    line = _one_line_error(done)
    assert match in line and len(done.stderr.strip().splitlines()) == 1  # caught before Hydra: nothing else


def test_multirun_flag_works_anywhere(tmp_path):
    for argv in (["mode=plan", "experiment=selftest", "method=attnlrp,pa_lrp", "-m"],
                 ["mode=plan", "-m", "experiment=selftest", "method=attnlrp,pa_lrp"]):
        done = run_cli(*argv, f"run_dir={tmp_path / 'plan'}", cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.count("1 cell(s), 1 job(s)") == 2, done.stdout  # one plan per swept method


def test_help_starts_with_what_the_tool_does_and_three_examples(tmp_path):
    done = run_cli("--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("palrp-bench: a benchmark harness for the faithfulness of attribution methods")
    head = text[:text.index("== Configuration groups ==")]
    examples = [line for line in head[head.index("Examples:"):].splitlines()[1:] if line.strip().startswith("palrp")]
    assert len(examples) == 3 and "experiment: " in text[text.index("== Configuration groups =="):]


def test_version_is_ours_with_the_git_commit(tmp_path):
    """``--version`` prints the installed version and, when the package runs from a checkout of this project (its
    parent holds ``.git`` and ``pyproject.toml``: the CLI's own question, ``cli.checkout_commit``), that
    checkout's commit. A source tree that is not a checkout, e.g. an unpacked archive inside another git repository,
    prints no commit, even though ``git rev-parse`` there would name the enclosing repository's."""
    import subprocess
    from importlib import metadata

    from palrp_bench.cli import checkout_commit
    from runner.harness import REPO

    done = run_cli("--version", cwd=tmp_path)
    assert done.returncode == 0 and "Hydra" not in done.stdout
    commit = checkout_commit()
    if (REPO / ".git").exists():  # a checkout (or worktree) of this project: its own commit, whatever encloses it
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        assert head and commit is not None and commit.startswith(head[:12])
    else:
        assert commit is None
    expected = f"palrp-bench {metadata.version('palrp-bench')}" + (f" (git {commit})" if commit else "")
    assert done.stdout.strip() == expected


def test_a_source_tree_inside_another_repository_names_no_commit(tmp_path, monkeypatch):
    """What the GPU machine had: the project unpacked from an archive inside some other git repository. The CLI
    asks whether the package's own root is a checkout, not git, so it prints no commit there."""
    import subprocess

    from palrp_bench import cli

    outer = tmp_path / "outer"
    package = outer / "palrp" / "palrp_bench"
    package.mkdir(parents=True)
    (outer / "palrp" / "pyproject.toml").write_text("[project]\nname = 'palrp-bench'\n")
    subprocess.run(["git", "init", "-q", str(outer)], check=True)
    subprocess.run(["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "outer"], check=True)
    monkeypatch.setattr(cli, "__file__", str(package / "cli.py"))
    assert cli.checkout_commit() is None
    subprocess.run(["git", "init", "-q", str(outer / "palrp")], check=True)  # now the tree is a checkout itself
    subprocess.run(["git", "-C", str(outer / "palrp"), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "own"], check=True)
    own = subprocess.run(["git", "-C", str(outer / "palrp"), "rev-parse", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    assert cli.checkout_commit() == own[:12]


def test_batch_size_takes_an_integer_or_auto(tmp_path):
    line = _one_line_error(run_cli("runner.batch_size=abc", cwd=tmp_path))  # an int or "auto"
    assert "runner.batch_size must be a positive integer or 'auto', got 'abc'" in line


def test_paper_table_without_gpu_or_data_lists_what_is_missing(tmp_path):
    done = run_cli("experiment=table1", f"run_dir={tmp_path / 'r'}", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-1500:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[0] == "palrp-bench: error: cannot run experiment table1: 5 problems found before loading anything:"
    listing = "\n".join(lines[1:])
    assert "1. a CUDA GPU" in listing and "./checkpoints/tinyllama_imdb" in listing and "IMDB Dataset.csv" in listing
    assert listing.count("fix: ") == 5
    planned = listing.split("once fixed, the run is planned at (mode=plan shows every cell):\n", 1)[1]
    assert "cpu time per task: imdb " in planned and re.search(r"total: [\d,.]+ device-hours", planned)
    assert not (tmp_path / "r" / "cells").exists()


def test_gpu_request_and_bad_shard_on_cpu(tmp_path):
    line = _one_line_error(run_cli("experiment=selftest", "runner.devices=[cuda:0]", cwd=tmp_path, env=NO_GPU))
    assert "GPU 0 was requested" in line and "runner.devices=[cpu]" in line
    line = _one_line_error(run_cli("experiment=selftest", "runner.n_shards=4", "runner.shard=4", cwd=tmp_path))
    assert "shard index 4 is out of range for runner.n_shards=4" in line


def test_plan_mode_prints_the_jobs(tmp_path):
    done = run_cli("mode=plan", "experiment=table3", "runner.n_shards=2", cwd=tmp_path)
    assert done.returncode == 2, done.stderr  # no GPU, no hub here: the plan lists what is missing
    assert "12 cell(s), 24 job(s)" in done.stdout and "(each cell is split into 2 shard jobs)" in done.stdout
    assert re.search(r"llama3_8b\s+mcqa_noncausal\s+pe_only\s+<=1000\*", done.stdout)


def test_multirun_sweep_shares_one_run_dir_then_report(tmp_path):
    run_dir = tmp_path / "sweep"
    done = run_cli("-m", "experiment=selftest", "task=selftest", "task.options.n=8", "method=attnlrp,pa_lrp",
                   "runner.quiet=true", f"run_dir={run_dir}", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    df = read_results(run_dir)
    assert set(df.method) == {"attnlrp", "pa_lrp"} and df.sample_id.nunique() == 8
    assert (run_dir / "logs/palrp-bench.log").exists() and (run_dir / "manifest.json").exists()
    assert re.search(r"\| pa_lrp\s+\| 8\s+\| 0\s+\|", done.stdout)  # the readable summary table
    # each job prints its own table once, then the sweep prints the whole run (not a growing table per job)
    jobs, whole = done.stdout.split(f"all 2 jobs of the sweep, {run_dir}:")
    assert [jobs.count("| attnlrp "), jobs.count("| pa_lrp ")] == [1, 1] and jobs.index("| attnlrp ") < jobs.index(
        "| pa_lrp ")
    assert [whole.count("| attnlrp "), whole.count("| pa_lrp ")] == [1, 1]
    # mode=report without run_dir: the newest run under run_root (as palrp-bench-report), not a new time stamp
    report = run_cli("mode=report", f"run_root={tmp_path}", "report.n_boot=200", cwd=tmp_path)
    assert report.returncode == 0, report.stderr[-2000:]
    assert "## Paired comparisons" in report.stdout and (run_dir / "report/report.tex").exists()
    written = report.stdout[report.stdout.index(f"written to {run_dir / 'report'}/: report.md"):]
    plots = sorted(p.name for p in (run_dir / "report").glob("*.png"))
    assert plots and all(name in written for name in plots) and "..." not in written
    line = _one_line_error(run_cli("mode=report", f"run_root={tmp_path / 'none'}", cwd=tmp_path))
    assert f"no finished run under {tmp_path / 'none'}/" in line


def test_unreadable_checkpoint_is_one_line(tmp_path):
    bad = tmp_path / "broken_ckpt"
    bad.mkdir()
    (bad / "config.json").write_text("{ this is not json")
    from palrp_bench.data.synthetic_text import ASSET_DIR

    line = _one_line_error(run_cli("model=tinyllama", "task=synthetic_sentiment", "method=pa_lrp",
                                   f"model.source={bad}", f"model.tokenizer={ASSET_DIR / 'tokenizer'}",
                                   "runner.devices=[cpu]", f"run_dir={tmp_path / 'r'}", cwd=tmp_path))
    assert "tinyllama" in line or str(bad) in line
    assert "checkpoint" in line or "cannot load" in line


@pytest.mark.parametrize("multirun", [False, True])
@pytest.mark.parametrize("where, problem", [
    ("afile", "run_dir {d}/afile is a file, not a directory"),
    ("afile/run", "run_dir {d}/afile/run cannot be created: {d}/afile is a file"),
])
def test_a_run_dir_that_is_a_file_or_cannot_be_created_is_one_line(tmp_path, where, problem, multirun):
    (tmp_path / "afile").write_text("keep me")
    args = ["experiment=selftest", f"run_dir={tmp_path / where}"]
    line = _one_line_error(run_cli(*(["-m", "method=attnlrp,pa_lrp"] if multirun else []), *args, cwd=tmp_path))
    assert problem.format(d=tmp_path) in line and "-- give run_dir a directory" in line
    assert (tmp_path / "afile").read_text() == "keep me"


def test_a_run_dir_under_a_read_only_directory_is_one_line(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("this user writes into read-only directories (root): the file-system check cannot fail")
        line = _one_line_error(run_cli("experiment=selftest", f"run_dir={locked / 'run'}", cwd=tmp_path))
        assert f"run_dir {locked / 'run'} cannot be created: {locked} is not writable" in line
    finally:
        locked.chmod(0o755)


def test_an_unwritable_parent_is_named(tmp_path, monkeypatch):
    """The check itself, with the permission answer faked (root writes into read-only directories anyway)."""
    from palrp_bench import rundir

    locked = tmp_path / "locked"
    locked.mkdir()
    monkeypatch.setattr(rundir.os, "access", lambda path, mode: Path(path) != locked)
    with pytest.raises(BadInputError, match=f"run_dir {locked}/a/b cannot be created: {locked} is not writable"):
        rundir.check_run_dir(locked / "a" / "b")
    with pytest.raises(BadInputError, match=f"run_dir {locked} is not writable -- give run_dir"):
        rundir.check_run_dir(locked)
    rundir.check_run_dir(tmp_path / "new" / "run")  # creatable: no error, nothing created
    assert not (tmp_path / "new").exists()


def test_a_run_dir_the_file_system_refuses_is_one_line(tmp_path, monkeypatch):
    """What the check cannot foresee (a read-only file system, a full disk): the creation error, in one line."""
    from palrp_bench.app import run
    from runner.harness import compose_cfg

    target = tmp_path / "run"
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == target:
            raise OSError(30, "Read-only file system")
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    with pytest.raises(BadInputError, match=f"cannot create run_dir {target}: Read-only file system -- give run_dir"):
        run(compose_cfg(target, "experiment=selftest", "runner.quiet=true"),
            out=open(os.devnull, "w"))


@pytest.mark.parametrize("args", [
    ("model=tiny_vit", "task=synthetic_sentiment", "method=pa_lrp"),  # the preflight refuses the cell
    ("-m", "model=tiny_vit", "task=synthetic_sentiment", "method=pa_lrp,attnlrp"),  # a sweep's first job does
    ("experiment=selftest", "runner.n_shards=2", "runner.shard=5"),  # the plan refuses the shard
])
def test_a_refused_invocation_leaves_nothing_behind(tmp_path, args):
    """With the default run_dir (runs/<stamp> under the working directory) nothing is created: no runs/, no
    .hydra/, no logs/."""
    _one_line_error(run_cli(*args, cwd=tmp_path))
    assert os.listdir(tmp_path) == []


def _tree(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def test_a_refused_resume_leaves_the_run_dir_as_it_was_and_a_run_records_its_config_and_log(tmp_path):
    run_dir = tmp_path / "r"
    args = ("experiment=selftest", "task=selftest", "task.options.n=3", f"run_dir={run_dir}", "runner.quiet=true")
    done = run_cli("-m", *args, "method=attnlrp,pa_lrp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    configs = sorted(run_dir.glob(".hydra/*/config.yaml"))
    assert len(configs) == 2 and all((c.parent / "overrides.yaml").is_file() for c in configs)  # one per job
    assert "task.options.n=3" in configs[0].with_name("overrides.yaml").read_text()
    assert "run dir" in (run_dir / "logs" / "palrp-bench.log").read_text()
    assert (run_dir / "multirun.yaml").is_file()
    before = _tree(run_dir)
    # other settings (the settings guard), then a sweep whose first job is refused the same way
    line = _one_line_error(run_cli(*args, "method=pa_lrp", "protocol=corrected", cwd=tmp_path))
    assert "already holds results of selftest/selftest/pa_lrp with other settings" in line
    _one_line_error(run_cli("-m", *args, "method=pa_lrp,attnlrp", "protocol=corrected", cwd=tmp_path))
    assert _tree(run_dir) == before
    assert sorted(os.listdir(tmp_path)) == ["r"]
