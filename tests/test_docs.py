"""The documents the code cites exist and hold what is cited: every "protocol.md section N" has a section N in
docs/protocol.md, every "design.md section N" one in docs/design.md, nothing cites the design notes that live
outside the repository (the upper-case notes), and no committed document names a path of one machine."""
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CITATION = re.compile(r"(?:docs/)?protocol\.md,? (?:section|sec\.) ([0-9]+)", re.IGNORECASE)
DESIGN_CITATION = re.compile(r"(?:docs/)?design\.md,? sections? ([0-9]+)")


def _sources():
    for folder in ("palrp_bench", "tests", "scripts", "docs"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in (".py", ".md", ".yaml") and path.is_file():
                yield path
    yield REPO / "README.md"


def test_every_cited_protocol_section_exists():
    sections = set(re.findall(r"^## ([0-9]+)\. ", (REPO / "docs/protocol.md").read_text(), flags=re.MULTILINE))
    assert sections == {"1", "2", "3", "4", "5", "6"}
    cited = {(path.relative_to(REPO).as_posix(), n) for path in _sources()
             for n in CITATION.findall(path.read_text(errors="replace"))}
    assert cited and not [c for c in cited if c[1] not in sections]
    assert (REPO / "docs/design.md").is_file() and "accounting identity" in (REPO / "docs/design.md").read_text()


def test_every_cited_design_section_exists_and_the_design_notes_outside_the_repository_are_not_cited():
    sections = set(re.findall(r"^## ([0-9]+)\. ", (REPO / "docs/design.md").read_text(), flags=re.MULTILINE))
    texts = {path.relative_to(REPO).as_posix(): path.read_text(errors="replace") for path in _sources()}
    cited = {(name, n) for name, text in texts.items() for n in DESIGN_CITATION.findall(text)}
    assert cited and not [c for c in cited if c[1] not in sections]
    outside = re.compile(r"\b(?:PROTO" r"COL|DES" r"IGN)\.md")  # spelled in parts so this file does not match
    assert not [name for name, text in texts.items() if outside.search(text)]


@pytest.mark.parametrize("path", ["docs", "tests/data", "README.md", "palrp_bench/paper"])
def test_documents_name_no_machine_paths(path):
    root = REPO / path
    files = [root] if root.is_file() else sorted(root.rglob("*.md"))
    offending = [f"{f.relative_to(REPO)}: {m}" for f in files
                 for m in re.findall(r"(?<![\w.])/(?:work|home|root|Users|tmp)/[\w./+-]+", f.read_text())]
    assert not offending
