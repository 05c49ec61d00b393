"""Shared fixtures: the shared data folder, a fake clock."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from toolguard.testing import FakeClock

# LangChain 1.5 needs Python 3.11 (the dev extra installs it only there): on 3.10 these
# modules, which import it at the top, are not collected (the adapter tests skip themselves,
# with the reason). CI runs 3.11.
collect_ignore = [] if sys.version_info >= (3, 11) else [
    "tools/test_integration_core.py", "tools/test_decorator_order.py"]

# Frameworks whose pins conflict with the dev extra are tested in a venv of their own
# (.ci/run creates it and runs these modules there): elsewhere they are not collected.
_OWN_VENV = {"adapters/test_adapter_google_adk.py": "google.adk",
             "adapters/test_adapter_strands.py": "strands",
             "adapters/test_adapter_smolagents.py": "smolagents",
             "adapters/test_adapter_autogen.py": "autogen_agentchat",
             "adapters/test_adapter_crewai.py": "crewai"}
collect_ignore += [name for name, module in _OWN_VENV.items()
                   if importlib.util.find_spec(module.split(".")[0]) is None
                   or importlib.util.find_spec(module) is None]

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("TOOLGUARD_SHARED", ROOT.parent / "shared"))


@pytest.fixture(scope="session", autouse=True)
def _approval_secret_home(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The approval secret (``$XDG_CONFIG_HOME/toolguard/approval.key``) of every guard on a
    shared store, and of the processes tests start, in a temporary folder: never the home of
    whoever runs the tests."""
    os.environ["XDG_CONFIG_HOME"] = str(tmp_path_factory.mktemp("config"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1_000_000.0)


@pytest.fixture(scope="session")
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"shared data folder not found at {SHARED} (set TOOLGUARD_SHARED)")
    return SHARED


def _missing_shared() -> str | None:
    if SHARED.is_dir():
        return None
    return (f"the shared data folder is not at {SHARED}: the tests that read the real "
            "recordings and cases fail; clone this repository beside it, or set "
            "TOOLGUARD_SHARED to its path")


def pytest_report_header() -> str:
    return _missing_shared() or f"shared data: {SHARED}"


def pytest_terminal_summary(terminalreporter: Any) -> None:
    missing = _missing_shared()
    if missing is not None:  # said again at the end, beside the failures it explains
        terminalreporter.write_line(f"NOTE: {missing}", yellow=True, bold=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # the Redis Cluster a test started for this session (redis_servers.cluster_url)
    from .redis_servers import stop_session_cluster

    stop_session_cluster()
