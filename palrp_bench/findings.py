"""What a spec's preflight check reports (docs/planning.md "Preflight"): the problems of one model or task, each
with its fix written as the command-line overrides that apply it, and what it needs from the Hugging Face hub.

Dataset specs (:mod:`palrp_bench.data.registry`) and model loaders (:mod:`palrp_bench.models.loading`) check their
own data and weights into a :class:`Findings`; the preflight (:mod:`palrp_bench.planning.preflight`) gathers them,
then asks the hub once for everything that is needed from it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Findings", "HubNeed"]


@dataclass(frozen=True)
class HubNeed:
    """Something taken from the hub: ``repo`` (``repo_type`` model or dataset), why (``what``), whether the local
    cache has it, the fix that avoids the hub, and whether to check gated access."""

    repo: str
    repo_type: str
    what: str
    cached: bool
    fix: str
    check_access: bool = False


@dataclass
class Findings:
    """The problems and hub needs of one checked config (``subject``: a task or model config). ``overrides`` writes
    assignments as the command line that applies them (``task.path=<csv>`` -> ``task=imdb task.path=<csv>`` when
    the command line did not select the group); ``weights_hint`` is added to the fix of missing weights (how to
    train them)."""

    subject: Any
    overrides: Callable[..., str] = lambda *assignments: " ".join(assignments)
    problems: list[tuple[str, str]] = field(default_factory=list)
    needs: list[HubNeed] = field(default_factory=list)
    weights_hint: str = ""

    @property
    def task(self) -> Any:
        return self.subject

    def add(self, item: str, fix: str) -> None:
        if (item, fix) not in self.problems:
            self.problems.append((item, fix))

    def fix(self, *assignments: str) -> str:
        """The command line of ``assignments`` for this config."""
        return self.overrides(*assignments)

    def need(self, repo: str, repo_type: str, what: str, cached: bool, fix: str, check_access: bool = False) -> None:
        self.needs.append(HubNeed(repo, repo_type, what, cached, fix, check_access))
