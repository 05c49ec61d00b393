"""The shipped example policies on the shared labelled real runs (``../shared/data/realruns``):
no successful run is blocked, halted or fed a cached answer other than what its call
returned; the failed runs show what the guard did to them (the README's figures)."""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import toolguard as tg
from tests.conftest import ROOT, SHARED
from toolguard.replay._labelled import Judged, LabelledRun, judge, read_index

REALRUNS = SHARED / "data" / "realruns"
POLICIES = ROOT / "examples" / "policies"


def shipped(item: LabelledRun) -> Path:
    """The shipped policy that matches a run: the index's, except the two domains it has
    none for (tau-bench retail, tau2 telecom)."""
    where = item.file.parent.name
    if where == "tau-bench-grok-3":
        return POLICIES / "retail.toml"
    if "telecom" in item.file.name:
        return POLICIES / "telecom.toml"
    assert item.policy is not None
    return POLICIES / item.policy


@cache
def judged() -> list[Judged]:
    policies: dict[Path, tg.Policy] = {}

    def policy_for(item: LabelledRun) -> tg.Policy:
        path = shipped(item)
        if path not in policies:
            policies[path] = tg.load_policy(path, env={})
        return policies[path]

    out, problems = judge(read_index(REALRUNS / "index.jsonl"), policy_for)
    assert problems == []
    return out


def test_no_successful_real_run_is_stopped_by_its_shipped_policy() -> None:
    success = [j for j in judged() if j.labelled.label == "success"]
    assert len(success) == 86
    assert [(j.report.id, j.reasons) for j in success if j.harmed] == []


def test_what_the_shipped_policies_do_to_the_failed_real_runs() -> None:
    failure = [j for j in judged() if j.labelled.label == "failure"]
    assert len(failure) == 57
    assert [j.report.id for j in failure if j.stopped_at is not None] == []
    warned = Counter(s.reason.split(" after ")[0].split(" of ")[0] for j in failure
                     for s in j.report.steps if s.decision is tg.Decision.WARN)
    # the flaky order lookups of tau-bench retail, retried with a notice to back off
    assert warned == {"retry 1": 17, "retry 2": 3}
