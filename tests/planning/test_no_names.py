"""Planning names no dataset, model loader or task kind (docs/architecture.md "Specs own their knowledge"): it loops
over the registered specs, so a new dataset, loader or kind never needs a line in planning/.

Every identifier and every string of planning's code (docstrings aside) is read for a registered name: a string equal
to one, or holding one as a word (but for the names that are also ordinary English or library words, ``random``,
``evidence``, ``hf`` of ``hf auth login``, ...); docstrings and comments likewise.
"""
from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from palrp_bench.data.registry import DATASETS
from palrp_bench.evaluation.tasks import TASK_KINDS
from palrp_bench.models.loading import LOADERS

PLANNING = Path(__file__).resolve().parents[2] / "palrp_bench" / "planning"
FILES = sorted(PLANNING.glob("*.py"))
#: registered names that are also words of prose or library names; in code they count like any other
PROSE_WORDS = {"random", "evidence", "selftest", "timm", "torchvision", "hf", "qa"}
WORD = re.compile(r"[A-Za-z0-9_]+")


def _names() -> set[str]:
    return set(DATASETS.names()) | set(LOADERS.names()) | set(TASK_KINDS.names())


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                ids.add(id(first.value))
    return ids


def _code_mentions(source: str, names: set[str]) -> list[str]:
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            words = {node.value} | set(WORD.findall(node.value)) - PROSE_WORDS
            found += [f"string {node.value!r} (line {node.lineno})" for w in words if w in names]
        elif isinstance(node, ast.Name) and node.id in names:
            found.append(f"name {node.id} (line {node.lineno})")
        elif isinstance(node, ast.Attribute) and node.attr in names:
            found.append(f"attribute .{node.attr} (line {node.lineno})")
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in names:
            found.append(f"definition {node.name} (line {node.lineno})")
    return found


def _prose_mentions(source: str, names: set[str]) -> list[str]:
    tree = ast.parse(source)
    prose = [(c.value.value, c.value.lineno) for c in ast.walk(tree)
             if isinstance(c, ast.Expr) and isinstance(c.value, ast.Constant) and id(c.value) in _docstrings(tree)]
    prose += [(t.string, t.start[0]) for t in tokenize.generate_tokens(io.StringIO(source).readline)
              if t.type == tokenize.COMMENT]
    return [f"'{w}' in prose (line {line})" for text, line in prose for w in re.findall(r"`*\b[a-z0-9_]+\b`*", text)
            if w.strip("`") in names - PROSE_WORDS]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_planning_names_no_dataset_loader_or_task_kind(path):
    source = path.read_text()
    found = _code_mentions(source, _names()) + _prose_mentions(source, _names())
    assert not found, f"planning/{path.name} names registered specs: {found}"


def test_the_check_finds_a_name():
    """The check can fail: a planning module branching on a dataset or a task kind is caught."""
    source = ('"""Prices imdb."""\n'
              'def pool(task):\n    # the imagenet subset\n    if task.dataset == "wikipedia" or task.kind == "next_token":\n'
              '        return f"{task.name}/synthetic_text"\n')
    names = _names()
    assert len(_code_mentions(source, names)) == 3 and len(_prose_mentions(source, names)) == 2
