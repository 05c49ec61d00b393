"""The whole report of every shared recording set is unchanged (``tests/replay_golden.py``):
the JSON document, the JSON lines, the verbose table and every step's argument excerpt, run by
run. A change that moves any of them (a reader, the runner, the classifier, the normalizer)
fails here, naming the set and the runs; regenerate the golden file only for an intended
change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.replay_golden import SETS, report_of
from toolguard.replay import _parallel

GOLDEN = ROOT / "tests" / "golden" / "replay_reports.json"


@pytest.mark.usefixtures("shared")
@pytest.mark.parametrize("jobs", [1, 2])
@pytest.mark.parametrize("name", sorted(SETS))
def test_the_whole_report_is_unchanged(name: str, jobs: int,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """By worker processes too: small batches, so that even a small set spreads over both."""
    monkeypatch.setattr(_parallel, "BATCH_CALLS", 16)
    expected = json.loads(Path(GOLDEN).read_text())[name]
    got = report_of(name, jobs)
    changed = sorted(run for run in expected["runs"].keys() | got["runs"].keys()
                     if expected["runs"].get(run) != got["runs"].get(run))
    assert changed == [], f"{name}: these runs' reports changed"
    assert got == expected
