"""The order of a ladder's thresholds (``warn_at ≤ block_at ≤ halt_at``), checked where a
policy is loaded (``policy._loader``) and where a tool's override meets its decorator's effect
(``_resolve``). Plain values in, problems out: no pydantic, so resolving a tool needs no
model import."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["LADDER_KEYS", "out_of_order", "override_order_problems"]

LADDER_KEYS = ("warn_at", "block_at", "halt_at")


def override_order_problems(given: Mapping[str, Any], values: Mapping[str, Any], effect: str
                            ) -> Iterator[tuple[str, str]]:
    """A tool's ladder override out of order: ``given`` are the thresholds the tool sets,
    ``values`` those merged onto the ``effect`` ladder (``""``: the override alone). Yields
    the blamed key (one the tool sets) and what it must be."""
    for low, low_v, high, high_v in out_of_order(values):
        if high in given:
            where = "" if low in given else f", from ladder.{effect}"
            yield high, f"must be ≥ {low} ({low_v}{where})"
        elif low in given:
            yield low, f"must be ≤ {high} ({high_v}, from ladder.{effect})"


def out_of_order(thresholds: Mapping[str, Any]) -> Iterator[tuple[str, int, str, int]]:
    """Neighbouring thresholds out of order, among those given as integers: ``warn_at`` and
    ``halt_at`` are neighbours when ``block_at`` is absent (or not an integer)."""
    given = [(k, v) for k in LADDER_KEYS
             if type(v := thresholds.get(k)) is int]  # not bool
    for (low, low_v), (high, high_v) in itertools.pairwise(given):
        if low_v > high_v:
            yield low, low_v, high, high_v
