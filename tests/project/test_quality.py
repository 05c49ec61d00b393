"""Lint and type checks are part of the test suite, so one command (``python -m pytest``) runs
everything CI runs: ruff over the tree and ``mypy --strict`` over package, tests, benchmarks
and examples (settings in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)


def test_ruff_is_clean() -> None:
    done = _run(sys.executable, "-m", "ruff", "check", ".")
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_is_clean() -> None:
    done = _run(sys.executable, "-m", "mypy")
    assert done.returncode == 0, done.stdout + done.stderr
