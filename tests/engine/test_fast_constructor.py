"""The hot path's constructors of frozen dataclasses (``toolguard._results._fast_constructor``)
build the very object the class's own constructor builds."""

from __future__ import annotations

import dataclasses

import pytest

from toolguard._results import ToolResult, _fast_constructor, new_result
from toolguard._types import Decision, Effect
from toolguard.engine._core import Verdict, _verdict


def test_a_result_built_fast_is_the_one_the_class_builds() -> None:
    given = ("grep", "t#1", Decision.WARN, "text", ("v", 1), False, None, "repeated", "stop",
             3, Effect.MUTATING, "h" * 32, "t:grep:h", 0.25, Decision.BLOCK)
    fast, slow = new_result(*given), ToolResult(*given)
    assert type(fast) is ToolResult
    assert fast == slow and hash(fast) == hash(slow) and repr(fast) == repr(slow)
    assert new_result("grep", "t#2", Decision.ALLOW, "x") == ToolResult("grep", "t#2",
                                                                      Decision.ALLOW, "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tool = "other"  # type: ignore[misc]


def test_keywords_and_defaults_are_the_constructors() -> None:
    assert _verdict(Decision.BLOCK, reason="r", retry=True) == Verdict(Decision.BLOCK,
                                                                       reason="r", retry=True)
    assert _verdict(Decision.ALLOW) == Verdict(Decision.ALLOW)
    with pytest.raises(TypeError):
        _verdict()  # the decision is required, as for Verdict()


def test_a_default_factory_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WithList:
        items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="default_factory"):
        _fast_constructor(WithList)
