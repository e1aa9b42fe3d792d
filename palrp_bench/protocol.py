"""The reproduction protocol: ``official`` (as the official PA-LRP code ran) or ``corrected`` (its documented
defects fixed). One definition of the word; every correction is a named switch elsewhere that only takes its
default from the protocol (docs/protocol.md).

The word means only this in palrp-bench. The evaluations a run performs (``nlp_perturbation``,
``vision_perturbation``, ``segmentation``, ``positional_share``) are *metrics* (config group ``metric``), the
numbers they yield *table metrics* (``auac``, ``miou``, ...).
"""
from __future__ import annotations

from enum import Enum
from typing import Mapping, Sequence

from .errors import BadInputError

__all__ = ["Protocol", "PROTOCOLS", "check_protocol", "resolve_switch"]


class Protocol(Enum):
    """``official`` follows the official code; ``corrected`` turns the named fixes on."""

    official = "official"
    corrected = "corrected"


#: the protocol names, in order
PROTOCOLS: tuple[str, ...] = tuple(p.value for p in Protocol)


def check_protocol(protocol) -> str:
    """The protocol's name (an enum member or a string), or a one-line :class:`BadInputError`."""
    name = protocol.value if isinstance(protocol, Protocol) else protocol
    if name not in PROTOCOLS:
        raise BadInputError(f"unknown protocol {protocol!r}", f"use one of: {', '.join(PROTOCOLS)}")
    return name


def resolve_switch(name: str, choice: str | None, choices: Sequence[str], defaults: Mapping[str, str],
                   protocol) -> str:
    """The value of the named switch ``name`` (``tie_break``, ``tf32``, ...): ``choice`` when given (one of
    ``choices``), else the default of ``protocol`` in ``defaults``; a bad value is a one-line
    :class:`BadInputError`."""
    protocol = check_protocol(protocol)
    if choice is None:
        return defaults[protocol]
    if choice not in choices:
        raise BadInputError(f"unknown {name} {choice!r}",
                            f"use one of: {', '.join(choices)} (or leave it unset for the protocol's default)")
    return choice
