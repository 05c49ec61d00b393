"""Every case in ../shared/cases (real agent loops and legitimate repeats rebuilt from public
bug reports) and in tests/cases (synthetic ones of the same format, one per detection rule
and its look-alikes) replayed through the engine with a policy built from its ``effects``;
every ``must`` property asserted. tests/cases may also give a tool ``shell`` (the argument
the shell classifier reads) and ``result`` (``[tools.X.result]``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.conftest import ROOT, SHARED
from toolguard.policy._model import ArgOptions, ResultPolicy, ToolPolicy, ToolRule
from toolguard.testing import FakeClock, auto_defer

SHARED_CASES = sorted((SHARED / "cases").glob("*.jsonl"))
CASES = SHARED_CASES + sorted((ROOT / "tests" / "cases").glob("*.jsonl"))


def policy_for(effects: dict[str, Any]) -> tg.Policy:
    tools = {}
    for name, spec in effects.items():
        tools[name] = ToolPolicy(
            effect=tg.Effect(spec["effect"]),
            args={a: ArgOptions(**o) for a, o in spec.get("args", {}).items()},
            rules=tuple(ToolRule(match=r["match"], effect=r["effect"])
                        for r in spec.get("rules", [])),
            shell=spec.get("shell"),
            result=ResultPolicy(**spec["result"]) if "result" in spec else None,
        )
    return tg.Policy(tools=tools)


def replay_case(path: Path) -> tuple[dict[str, Any], list[tg.Decision], bool, int | None]:
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    header, calls = lines[0], lines[1:]
    guard = tg.Guard(policy_for(header["effects"]), approver=auto_defer, clock=FakeClock(0),
                     strict_tools=False)
    task = guard.task(header["case"])
    decisions: list[tg.Decision] = []
    halted_at = None
    for i, call in enumerate(calls):
        try:
            r = task._replay_call(call["tool"], call.get("raw_args", call["args"]),
                                  call["result"], is_error=call["is_error"],
                                  timeout=call.get("error_type") == "timeout")
        except tg.Halt:
            decisions.append(tg.Decision.HALT)
            halted_at = i
            break
        decisions.append(r.decision)
    return header, decisions, halted_at is not None, halted_at


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_case_must_properties(path: Path) -> None:
    header, decisions, halted, halted_at = replay_case(path)
    must = header["must"]

    def executed(i: int) -> bool:
        return i < len(decisions) and decisions[i].executed

    for i in must.get("run", []):
        got = decisions[i] if i < len(decisions) else "nothing (the run halted before)"
        assert executed(i), f"call {i} must run, got {got}"
    for i in must.get("not_run", []):
        assert not executed(i), f"call {i} must not run, got {decisions[i]}"
    if "stopped_by" in must:
        k = must["stopped_by"]
        assert any(not executed(i) for i in range(k + 1)), decisions
    if "halted_by" in must:
        assert halted and halted_at is not None and halted_at <= must["halted_by"], decisions


def test_every_case_is_checked() -> None:
    assert len(SHARED_CASES) == 13
    assert len(CASES) >= 22
