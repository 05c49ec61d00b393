"""Fixtures of the replay tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from toolguard.replay import Run, RunReport
from toolguard.replay._runner import _Replayer


@pytest.fixture
def kill_worker(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """``kill_worker(run_id)``: from then on (for the test), a worker process of ``replay
    --jobs`` that replays the run ``run_id`` dies at once (exit 3), as a crash in native code
    would; a replay in the test's own process is left alone."""
    parent = os.getpid()
    original = _Replayer.replay

    def kill(run_id: str) -> None:
        def breaking(self: _Replayer, guard: Any, task_id: str, run: Run) -> RunReport:
            if run.id == run_id and os.getpid() != parent:
                os._exit(3)
            return original(self, guard, task_id, run)

        monkeypatch.setattr(_Replayer, "replay", breaking)

    return kill
