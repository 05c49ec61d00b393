"""``Guard(...)`` refuses, at construction, arguments it cannot use, naming what it takes;
``Guard(policy=)`` takes what ``reload_policy`` takes (one helper serves both)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import toolguard as tg

POLICY = """
[budget]
max_tool_calls = 7
"""


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "p.toml"
    path.write_text(POLICY)
    return path


@pytest.mark.parametrize("as_path", [str, Path])
def test_the_guard_takes_a_policy_file_path_as_reload_policy_does(
        policy_file: Path, as_path: Any) -> None:
    guard = tg.Guard(policy=as_path(policy_file))
    assert guard.policy.budget.max_tool_calls == 7
    assert guard.policy.sources == (str(policy_file),)
    reloaded = tg.Guard()
    reloaded.reload_policy(as_path(policy_file))
    assert reloaded.policy == guard.policy


def test_a_policy_path_that_is_invalid_is_a_policy_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[budget]\nmax_tool_calls = 0\n")
    with pytest.raises(tg.PolicyError, match=r"budget\.max_tool_calls"):
        tg.Guard(policy=str(bad))


@pytest.mark.parametrize("value", [{"budget": {"max_tool_calls": 3}}, 42, ["p.toml"], b"p.toml"])
def test_anything_else_is_a_type_error_saying_what_is_taken(value: Any) -> None:
    for build in (lambda: tg.Guard(policy=value), lambda: tg.Guard().reload_policy(value)):
        with pytest.raises(TypeError, match=r"takes a toolguard\.Policy or a policy file's "
                                            rf"path \(str or os\.PathLike\), got "
                                            rf"{type(value).__name__}"):
            build()


def test_a_mapping_is_pointed_to_load_policy_dict() -> None:
    with pytest.raises(TypeError, match=r"load_policy_dict"):
        tg.Guard(policy={"budget": {}})  # type: ignore[arg-type]
