"""Every ``task.path`` format is checked by the preflight before anything loads (docs/data.md): a file in a wrong
format is one problem of one line, the published formats (the fixtures) pass, and on the command line a wrong
format stops with one line, exit 2 and no run folder."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from palrp_bench.errors import BadInputError
from palrp_bench.data.registry import DATASETS, load_dataset
from palrp_bench.findings import Findings
from palrp_bench.data.synthetic_text import load_tiny_tokenizer
from runner.harness import NO_GPU, run_cli

FIXTURES = Path(__file__).resolve().parent
TEXT, EVIDENCE, VISION = FIXTURES / "fixtures_text", FIXTURES / "fixtures_text" / "evidence", FIXTURES / "fixtures_vision"
#: a copy in each dataset's published format (the fixtures the loader tests read)
PUBLISHED = {"arc": TEXT / "arc", "wikipedia": TEXT / "wikipedia", "imdb": TEXT / "imdb" / "IMDB Dataset.csv",
             "sva": EVIDENCE / "agr_50_mostcommon_10K.tsv", "ra": EVIDENCE / "blimp_with_targets",
             "qa": EVIDENCE / "dev-v2.0.json", "squad": EVIDENCE / "dev-v2.0.json",
             "imagenet": VISION / "imagefolder", "imagenet_seg": VISION / "gtsegs_tiny.mat",
             "needle": TEXT / "wikipedia", "vqa": VISION / "vqa" / "data.jsonl", "refcoco": VISION / "refcoco"}
#: datasets that read plain text as one of their formats (the needle's haystack corpus): a wrong format is another
#: file type
TEXT_CORPORA = {"needle"}
#: options the fixtures need (a tiny ImageNet folder is no complete validation set, the tiny .mat file has 4 entries,
#: the SQuAD fixture is the validation file while qa reads train by default)
OPTIONS = {"imagenet": {"subset": "all"}, "imagenet_seg": {"expected_count": None}, "qa": {"split": "validation"}}
CHECKED = sorted(name for name in DATASETS.names() if DATASETS[name].check is not None)


def _task(dataset: str, path, **fields):
    values = dict(name=f"my_{dataset}", dataset=dataset, path=None if path is None else str(path), pool_size=None,
                  options=dict(OPTIONS.get(dataset, {})))
    return SimpleNamespace(**{**values, **fields})


def _problems(task) -> list[tuple[str, str]]:
    findings = Findings(task)
    DATASETS[task.dataset].preflight(task, findings)
    return findings.problems


def test_every_dataset_that_reads_a_path_has_a_published_copy_here():
    assert set(CHECKED) == set(PUBLISHED), "a new dataset reading task.path needs a fixture and a line in PUBLISHED"


@pytest.mark.parametrize("dataset", CHECKED)
def test_the_published_format_passes(dataset):
    assert _problems(_task(dataset, PUBLISHED[dataset])) == []


@pytest.mark.parametrize("dataset", CHECKED)
def test_plain_text_is_one_problem_of_one_line(dataset, tmp_path):
    path = tmp_path / ("notes.md" if dataset in TEXT_CORPORA else "notes.txt")
    path.write_text("Anarchism is a political philosophy.\nIt is sceptical of authority.\n")
    problems = _problems(_task(dataset, path))
    assert len(problems) == 1, problems
    item, fix = problems[0]
    assert "\n" not in item + fix and f"my_{dataset}" in item and "task.path=" in fix


@pytest.mark.parametrize("dataset", CHECKED)
def test_a_missing_path_is_one_problem(dataset, tmp_path):
    problems = _problems(_task(dataset, tmp_path / "nowhere"))
    assert len(problems) == 1 and "\n" not in problems[0][0] + problems[0][1], problems


def test_wikipedia_needs_only_the_columns_the_protocol_reads(tmp_path):
    """``id`` (the stable sample id) and ``text``; ``url`` and ``title`` are read when present."""
    lines = tmp_path / "wiki.jsonl"
    lines.write_text("".join(json.dumps({"id": i, "text": f"Article {i} is about topic {i}."}) + "\n"
                             for i in range(3)))
    assert _problems(_task("wikipedia", lines)) == []
    pool = load_dataset("wikipedia", path=str(lines), limit=2, tokenizer=load_tiny_tokenizer())
    assert [s.sample_id for s in pool] == ["wiki-0", "wiki-1"] and pool[0].meta["title"] == ""
    text_only = tmp_path / "text.jsonl"
    text_only.write_text(json.dumps({"text": "No id here."}) + "\n")
    [(item, _)] = _problems(_task("wikipedia", text_only))
    assert "lacks the columns ['id']" in item
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"id": 1, "text": "fine"}\nnot json\n')
    with pytest.raises(BadInputError) as err:
        load_dataset("wikipedia", path=str(broken), tokenizer=load_tiny_tokenizer())
    assert "line 2 is not JSON" in str(err.value) and "\n" not in str(err.value)


def test_sizes_are_checked_where_the_protocol_needs_them(tmp_path):
    """The IMDB test part must hold the pool; a CSV without the Kaggle columns says which it lacks."""
    [(item, fix)] = _problems(_task("imdb", PUBLISHED["imdb"], pool_size=5000))
    assert "smaller than the pool of 5000" in item and "task.pool_size=" in fix
    csv = tmp_path / "reviews.csv"
    csv.write_text("text,label\ngreat,1\n")
    [(item, _)] = _problems(_task("imdb", csv))
    assert "lacks the columns ['review', 'sentiment']" in item


def test_unknown_options_are_one_problem():
    [(item, fix)] = _problems(_task("wikipedia", PUBLISHED["wikipedia"], options={"max_lenght": 5}))
    assert "unknown option(s) ['max_lenght'] for dataset wikipedia" in item and "max_length" in fix


@pytest.mark.slow
def test_a_wrong_format_stops_the_command_in_one_line_and_writes_nothing(tmp_path):
    (tmp_path / "wiki.txt").write_text("Anarchism is a political philosophy.\n")
    done = run_cli("model=tiny_llama_causal", "task=wikipedia", "task.path=wiki.txt", "method=attnlrp",
                   "runner.devices=[cpu]", cwd=tmp_path, env=NO_GPU)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "wiki.txt is not a table file" in lines[0], done.stderr
    assert not (tmp_path / "runs").exists()


def test_docs_show_every_format_with_an_example():
    """docs/data.md has a section for each dataset that reads ``task.path``, with an example of its format."""
    import re

    text = (Path(__file__).resolve().parents[2] / "docs" / "data.md").read_text()
    sections = {m.group(1): m.group(2) for m in re.finditer(r"^## (.+?)\n(.*?)(?=^## |\Z)", text, re.M | re.S)}
    for dataset in CHECKED:
        body = next((b for head, b in sections.items() if re.search(rf"\b{dataset}\b", head)), None)
        assert body is not None and "```" in body, f"docs/data.md has no section with an example for {dataset}"
