"""The published tables ship inside the package: a wheel built from the source holds them, and they load through
the package API from that wheel alone (no checkout, no results/ folder on the path)."""
import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from runner.harness import REPO

PAPER_FILES = {"table1", "table2", "table3", "table4", "table5", "appendix_f", "attnlrp_table1", "evidence_table1"}
#: the tables those files hold (attnlrp_table1.csv also holds the AttnLRP paper's appendix Tables 5-8)
PAPER_TABLES = PAPER_FILES | {"attnlrp_table5", "attnlrp_table6", "attnlrp_table7", "attnlrp_table8"}


def test_the_wheel_holds_the_paper_tables_and_they_load_from_it(tmp_path):
    source = tmp_path / "src"  # build from a copy: setuptools writes build/ and *.egg-info next to the sources
    shutil.copytree(REPO / "palrp_bench", source / "palrp_bench",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
                           "-w", str(tmp_path / "dist"), str(source)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    log = done.stdout + done.stderr  # -v: the build backend's warnings are shown
    assert "adding 'palrp_bench/paper/table1.csv'" in log and "TOML table" not in log  # SPDX license string
    (wheel,) = (tmp_path / "dist").glob("palrp_bench-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        zf.extractall(tmp_path / "site")
    assert {f"palrp_bench/paper/{t}.csv" for t in PAPER_FILES} <= names
    assert {"palrp_bench/report/assets/report.js", "palrp_bench/report/assets/report.css"} <= names  # report.html
    probe = ("import palrp_bench.metrics.published as p, sys\n"
             "assert p.__file__.startswith(sys.argv[1]), p.__file__\n"
             "df = p.load_published()\n"
             "print(sorted(set(df.table)), len(df))\n")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "site")], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]
    tables, rows = out.stdout.strip().rsplit(" ", 1)
    assert set(ast.literal_eval(tables)) == PAPER_TABLES and int(rows) == len(_rows_in(REPO / "results" / "paper"))


def _rows_in(folder: Path) -> list[str]:
    return [line for path in sorted(folder.glob("*.csv")) for line in path.read_text().splitlines()[1:] if line]


def test_results_paper_is_the_package_copy():
    link = REPO / "results" / "paper"
    assert link.is_symlink() and link.resolve() == (REPO / "palrp_bench" / "paper").resolve()


def test_the_flan_t5_squad_rows_attach_to_a_run():
    """The AttnLRP paper's SQuAD v2 column: delta_a of every method of its Table 1, iou where the cell is legible,
    the appendix Table 8 areas, matched to a run's metrics.csv rows by model, task, method, metric and variant."""
    import pandas as pd

    from palrp_bench.metrics.published import attach_published, load_published

    published = load_published()
    flan = published[published.model == "flan_t5_xl"]
    methods = {"grad_x_input", "integrated_gradients", "smoothgrad", "grad_cam", "attn_rollout", "grad_attn_rollout",
               "atman", "cp_lrp", "attnlrp"}
    table1 = flan[flan.table == "attnlrp_table1"]
    assert set(table1[table1.metric == "delta_a"].method) == methods
    assert set(table1[table1.metric == "iou"].method) == methods - {"grad_x_input", "integrated_gradients",
                                                                     "smoothgrad"}
    assert set(flan[flan.table == "attnlrp_table8"].metric) == {"a_morf", "a_lerf"}
    run = pd.DataFrame({"model": "flan_t5_xl", "task": "squad_attnlrp", "paper_task": "squad_attnlrp",
                        "method": "attnlrp", "metric": ["delta_a", "iou", "a_morf"],
                        "variant": ["insertion", "default", "insertion"], "value": [1.0, 0.5, -5.0]})
    got = attach_published(run, published).set_index("metric")
    assert got.loc["delta_a", "published"] == 1.76 and got.loc["iou", "published"] == 0.84
    assert got.loc["a_morf", "published"] == -4.91 and got.loc["iou", "paper_table"] == "attnlrp_table1"
