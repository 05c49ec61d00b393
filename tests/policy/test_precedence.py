"""Precedence, lowest first: built-in < decorator < policy global section < policy [tools.X] <
environment variable; each step is checked on a real decorated tool via ``resolve_tool``
(after pydantic-settings' ``test_precedence_and_merging.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
import toolguard.testing
from toolguard._types import Effect
from toolguard.policy._loader import load_policy
from toolguard.policy._model import LadderThresholds, Policy
from toolguard.tools._decorators import mutating, readonly, spec_of
from toolguard.tools._resolve import ToolSettings, resolve_tool


@mutating
def plain_send(to: str) -> str:
    """Send without options: every setting comes from the policy or built-ins."""
    return to


@mutating(idempotency_ttl_s=60, max_calls=5)
def send_email(to: str) -> str:
    """Send an email (decorator options set)."""
    return to


@readonly
def lookup(key: str) -> str:
    """Look something up."""
    return key


def undecorated(x: int) -> int:
    return x


def _settings(
    tool: Callable[..., Any], tmp_path: Path, toml: str | None, env: dict[str, str] | None = None
) -> ToolSettings:
    if toml is None:
        policy = load_policy(None, env=env or {})
    else:
        path = tmp_path / "policy.toml"
        path.write_text(toml, encoding="utf-8")
        policy = load_policy(path, env=env or {})
    return resolve_tool(policy, spec_of(tool))


def test_idempotency_ttl_s(tmp_path: Path) -> None:
    file = str(tmp_path / "policy.toml")
    built_in = _settings(plain_send, tmp_path, None)
    assert (built_in.idempotency_ttl_s, built_in.sources["idempotency_ttl_s"]) == (
        Policy().idempotency.ttl_s,
        "built-in",
    )
    decorator = _settings(send_email, tmp_path, None)
    assert (decorator.idempotency_ttl_s, decorator.sources["idempotency_ttl_s"]) == (
        60,
        "decorator",
    )
    glob = "[idempotency]\nttl_s = 120\n"
    section = _settings(send_email, tmp_path, glob)
    assert (section.idempotency_ttl_s, section.sources["idempotency_ttl_s"]) == (120, file)
    per_tool = glob + "[tools.send_email]\nidempotency_ttl_s = 30\n"
    tool = _settings(send_email, tmp_path, per_tool)
    assert (tool.idempotency_ttl_s, tool.sources["idempotency_ttl_s"]) == (30, file)
    var = "TOOLGUARD_TOOLS__SEND_EMAIL__IDEMPOTENCY_TTL_S"
    env = _settings(send_email, tmp_path, per_tool, {var: "10"})
    assert (env.idempotency_ttl_s, env.sources["idempotency_ttl_s"]) == (10, f"env {var}")


def test_global_environment_variable_beats_the_decorator(tmp_path: Path) -> None:
    var = "TOOLGUARD_IDEMPOTENCY__TTL_S"
    settings = _settings(send_email, tmp_path, None, {var: "7.5"})
    assert settings.idempotency_ttl_s == 7.5
    assert settings.sources["idempotency_ttl_s"] == f"env {var}"


def test_max_calls(tmp_path: Path) -> None:
    file = str(tmp_path / "policy.toml")
    assert _settings(plain_send, tmp_path, None).max_calls is None
    assert _settings(plain_send, tmp_path, None).sources["max_calls"] == "built-in"
    decorator = _settings(send_email, tmp_path, None)
    assert (decorator.max_calls, decorator.sources["max_calls"]) == (5, "decorator")
    per_tool = "[tools.send_email]\nmax_calls = 3\n"
    tool = _settings(send_email, tmp_path, per_tool)
    assert (tool.max_calls, tool.sources["max_calls"]) == (3, file)
    var = "TOOLGUARD_TOOLS__SEND_EMAIL__MAX_CALLS"
    env = _settings(send_email, tmp_path, per_tool, {var: "2"})
    assert (env.max_calls, env.sources["max_calls"]) == (2, f"env {var}")


def test_effect(tmp_path: Path) -> None:
    file = str(tmp_path / "policy.toml")
    built_in = _settings(undecorated, tmp_path, None)
    assert (built_in.effect, built_in.sources["effect"]) == (
        Effect.MUTATING, 'default_effect = "mutating" (built-in)')
    glob = 'default_effect = "readonly"\n'
    section = _settings(undecorated, tmp_path, glob)
    assert (section.effect, section.sources["effect"]) == (
        Effect.READONLY, f'default_effect = "readonly" ({file})')
    # default_effect is for tools nothing classifies: a decorator classifies
    decorator = _settings(lookup, tmp_path, 'default_effect = "mutating"\n')
    assert (decorator.effect, decorator.sources["effect"]) == (Effect.READONLY, "decorator")
    per_tool = '[tools.lookup]\neffect = "mutating"\n'
    tool = _settings(lookup, tmp_path, per_tool)
    assert (tool.effect, tool.sources["effect"]) == (Effect.MUTATING, file)
    var = "TOOLGUARD_TOOLS__LOOKUP__EFFECT"
    env = _settings(lookup, tmp_path, per_tool, {var: "poll"})
    assert (env.effect, env.sources["effect"]) == (Effect.POLL, f"env {var}")


def test_default_effect_deny_from_the_environment(tmp_path: Path) -> None:
    settings = _settings(undecorated, tmp_path, None, {"TOOLGUARD_DEFAULT_EFFECT": "deny"})
    assert settings.deny is True
    assert settings.sources["effect"] == 'default_effect = "deny" (env TOOLGUARD_DEFAULT_EFFECT)'
    assert _settings(lookup, tmp_path, None, {"TOOLGUARD_DEFAULT_EFFECT": "deny"}).deny is False


def test_ladder(tmp_path: Path) -> None:
    file = str(tmp_path / "policy.toml")
    built_in = _settings(plain_send, tmp_path, None)
    assert built_in.mutating_ladder == Policy().ladder.mutating
    assert built_in.sources["mutating_ladder"] == "built-in"
    glob = "[ladder.mutating]\nwarn_at = 3\nblock_at = 4\nhalt_at = 5\n"
    section = _settings(plain_send, tmp_path, glob)
    assert section.mutating_ladder == LadderThresholds(warn_at=3, block_at=4, halt_at=5)
    assert section.sources["mutating_ladder"] == file
    per_tool = glob + "[tools.plain_send]\nladder = { halt_at = 7 }\n"
    tool = _settings(plain_send, tmp_path, per_tool)
    assert tool.mutating_ladder == LadderThresholds(warn_at=3, block_at=4, halt_at=7)
    assert tool.sources["mutating_ladder"] == file
    var = "TOOLGUARD_TOOLS__PLAIN_SEND__LADDER__HALT_AT"
    env = _settings(plain_send, tmp_path, per_tool, {var: "9"})
    assert env.mutating_ladder == LadderThresholds(warn_at=3, block_at=4, halt_at=9)
    # each threshold is credited to where it was set
    assert env.sources["mutating_ladder"] == f"warn_at, block_at: {file}; halt_at: env {var}"
    partial = _settings(plain_send, tmp_path, "[ladder.mutating]\nblock_at = 3\n")
    assert partial.sources["mutating_ladder"] == (
        f"warn_at, halt_at: built-in; block_at: {file}")


@pytest.mark.parametrize(
    ("toml", "env", "expected"),
    [
        (None, {}, 5),
        ("[tools.send_email]\nmax_calls = 3\n", {}, 3),
        (None, {"TOOLGUARD_TOOLS__SEND_EMAIL__MAX_CALLS": "1"}, 1),
        ("[tools.send_email]\nmax_calls = 3\n", {"TOOLGUARD_TOOLS__SEND_EMAIL__MAX_CALLS": "1"}, 1),
    ],
)
def test_each_layer_wins_over_the_ones_below(
    tmp_path: Path, toml: str | None, env: dict[str, str], expected: int
) -> None:
    assert _settings(send_email, tmp_path, toml, env).max_calls == expected


def test_deny_spares_calls_a_rule_or_an_approval_classifies() -> None:
    def bash(command: str) -> str:
        return "ok"

    def refund(order: str) -> str:
        return "refunded"

    def other(x: int = 0) -> str:
        return "ok"

    policy = tg.load_policy_dict({
        "default_effect": "deny",
        "tools": {"bash": {"rules": [{"match": {"command": "^ls$"}, "effect": "readonly"}]},
                  "refund": {"requires_approval": True},
                  "other": {"max_calls": 3}},  # limits alone do not classify it
    })
    task = tg.Guard(policy, [bash, refund, other], approver=tg.testing.auto_approve).task("t")
    listed = task.call("bash", {"command": "ls"})
    assert (listed.decision, listed.effect) == (tg.Decision.ALLOW, tg.Effect.READONLY)
    removed = task.call("bash", {"command": "rm -rf x"})
    assert removed.decision is tg.Decision.BLOCK and "does not classify" in removed.reason
    assert task.call("refund", {"order": "o1"}).decision is tg.Decision.ALLOW
    assert task.call("other", {}).decision is tg.Decision.BLOCK


def test_a_rule_sees_one_text_however_the_model_writes_the_value() -> None:
    def f(n: int = 0, flag: bool = False, ids: list[int] | None = None) -> str:
        return "ok"

    policy = tg.load_policy_dict({"tools": {"f": {"effect": "readonly", "rules": [
        {"match": {"n": "^5$"}, "effect": "mutating"},
        {"match": {"flag": "^true$"}, "effect": "mutating"},
        {"match": {"ids": r'^\[1,2\]$'}, "effect": "mutating"},
    ]}}})
    task = tg.Guard(policy, [f]).task("t")
    for text in ('{"n": 5}', '{"n": 5.0}', '{"flag": true}', '{"ids": [1.0, 2]}'):
        assert task.call("f", text).effect is tg.Effect.MUTATING, text
    assert task.call("f", '{"n": 6}').effect is tg.Effect.READONLY
