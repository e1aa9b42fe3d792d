"""The layer picture of docs/architecture.md, enforced: which package of palrp_bench may import which.

Every import statement of every module (function-level imports included) is read with ``ast`` and resolved to
the palrp_bench package it reaches; a reach outside the allowed set fails with the file and the import.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "palrp_bench"

#: the foundation every layer may use
BASE = {"errors", "rundir", "hub", "atomic_io", "protocol", "discovery", "numerics", "findings", "fingerprints",
        "stages"}

#: package (first component under palrp_bench) -> the packages it may import, besides itself and BASE
ALLOWED = {
    "errors": set(), "rundir": set(), "hub": set(), "atomic_io": set(), "protocol": set(), "discovery": {"errors"},
    "findings": set(), "fingerprints": {"hub"}, "stages": set(),
    "numerics": {"protocol"},
    "lrp": set(),
    "methods": {"lrp"},
    "metrics": set(),
    "data": set(),
    "models": {"lrp", "data"},
    "schema": set(),
    "catalog": {"schema"},
    # attributors: the methods that are not one LRP pass (baselines); they drive the twins like api does
    "attributors": {"lrp", "methods", "models"},
    "api": {"lrp", "methods", "models", "attributors"},
    "__init__": {"api"},
    # the methods as Captum attributions (one explain call each) and as inseq methods (through them)
    "captum": {"api", "lrp", "methods"},
    "inseq": {"captum", "methods"},
    "evaluation": {"api", "lrp", "methods", "models", "data", "metrics", "__init__"},
    "report": {"metrics"},
    "runner": {"evaluation", "models", "data", "metrics", "lrp", "methods", "schema", "catalog"},
    # planning prices what the runner would do (its cells and jobs, stored samples, remembered batch sizes) and
    # measures it (calibration loads and evaluates like a job); the runner never imports planning
    "planning": {"runner", "evaluation", "models", "data", "metrics", "lrp", "methods", "attributors", "schema",
                 "catalog"},
    # one invocation by mode: plan, calibrate, run (after the preflight), report
    "app": {"planning", "runner", "report", "models", "schema"},
    "cli": {"app", "runner", "schema", "catalog"},
    # training the models the benchmark evaluates (palrp-bench-finetune): checks its memory with planning's model
    "finetune": {"planning", "models", "data"},
    # the paper's heatmap figure: explains images and draws them with the report's map style
    "heatmap_figure": {"api", "models", "data", "report"},
    # measuring this machine from a checkout: the rehearsal drives the command line, the GPU check the test suite
    # (and records the commit as the command line reports it)
    "bench": {"cli", "app", "planning", "runner", "report", "evaluation", "api", "__init__", "attributors", "models",
              "methods", "lrp", "data", "metrics", "schema", "catalog"},
}


def _component(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "__init__"


def _module_parts(path: Path) -> list[str]:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = ["palrp_bench", *rel.parts]
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imports(path: Path, source: str | None = None):
    """``(line, absolute module name)`` of every import in ``path`` (or in ``source`` as if it were that file)
    that reaches into palrp_bench."""
    tree = ast.parse(path.read_text() if source is None else source, filename=str(path))
    package = _module_parts(path) if path.name == "__init__.py" else _module_parts(path)[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "palrp_bench":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "palrp_bench":
                continue
            if target == "palrp_bench" or (node.level and not node.module):
                for alias in node.names:  # from . import catalog -> palrp_bench.catalog
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target


def _reached(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_every_package_has_a_rule():
    assert {_component(p) for p in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_follow_the_layers(path):
    own = _component(path)
    allowed = ALLOWED[own] | BASE | {own}
    wrong = [f"line {line}: {module}" for line, module in _imports(path)
             if _reached(module) not in allowed and not (own == "__init__" and _reached(module) == "api")]
    assert not wrong, f"{path.relative_to(PACKAGE)} ({own}) may import only {sorted(allowed)}: {wrong}"


def test_the_checker_sees_relative_and_function_level_imports():
    """The rule check itself can fail: a models module importing methods inside a function is caught."""
    source = "import palrp_bench.lrp.rules\ndef f():\n    from ..methods.registry import get_method\n    from . import vit\n"
    reached = {_reached(m) for _, m in _imports(PACKAGE / "models" / "probe.py", source)}
    assert reached == {"lrp", "methods", "models"}
    assert "methods" not in ALLOWED["models"] | BASE


#: scripts that run in their own virtualenv beside a reference implementation (the official code, lxt), never
#: with palrp_bench's dependencies: whole programs there, by design (docs/reference_lxt.md)
REFERENCE_RUNS = {"make_official_fixtures.py", "reference_lxt.py", "reference_lxt_moe.py"}


@pytest.mark.parametrize("path", sorted((PACKAGE.parent / "scripts").glob("*.py")), ids=lambda p: p.name)
def test_scripts_are_entry_points_only(path):
    """Every script calls the ``main`` of a package module and defines nothing itself, so no test or package
    module can import a function from scripts/ (the library work lives in the package)."""
    if path.name in REFERENCE_RUNS:
        return
    tree = ast.parse(path.read_text())
    defined = [n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    imports = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not defined and any(m and m.startswith("palrp_bench.") for m in imports), (path.name, defined)


def test_nothing_imports_from_scripts():
    """No module of the package or the tests loads a file of scripts/ (by path, or with scripts/ on sys.path)."""
    loads = re.compile(r"spec_from_file_location\([^)]*[\"']scripts[\"']|sys\.path\.insert\([^)]*[\"']scripts[\"']")
    for folder in (PACKAGE, PACKAGE.parent / "tests"):
        for path in folder.rglob("*.py"):
            assert not loads.search(path.read_text()), path
