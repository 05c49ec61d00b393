"""An approval, and the stored result of a mutating call, stand for the exact values the tool
receives: no respelling of the call (key order, an explicit default, a null for an optional
argument, a null nested in an object or sent as a ``**kwargs`` key, ``1.0`` for ``1``, JSON
text) runs on them with a value the tool would not have received for the original."""

from __future__ import annotations

import random
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.testing import auto_approve, auto_defer

D = tg.Decision


def test_a_null_for_an_optional_argument_gets_the_default() -> None:
    """Regression: ``dry_run: bool | None = True`` approved as omitted, sent as null, reached
    the tool as None and deleted for real on the dry run's approval."""
    ran: list[str] = []

    @tg.requires_approval
    def delete_tree(path: str, dry_run: bool | None = True) -> str:
        ran.append("dry run" if dry_run else "DELETED")
        return ran[-1]

    task = tg.Guard(tools=[delete_tree], approver=auto_defer).task("t")
    first = task.call("delete_tree", {"path": "/srv/data"})
    assert first.decision is D.REVIEW
    task.approve(first.idempotency_key)
    again = task.call("delete_tree", {"path": "/srv/data", "dry_run": None})
    assert again.decision is D.ALLOW and ran == ["dry run"]


def test_a_nested_null_is_asked_about_afresh() -> None:
    """Regression: ``{"mode": "fast"}`` approved, ``{"mode": "fast", "dry_run": null}`` ran on
    it (the tool's ``.get("dry_run", True)`` read None, and purged)."""
    ran: list[dict[str, Any] | None] = []

    @tg.requires_approval
    def purge(path: str, opts: dict[str, Any] | None = None) -> str:
        ran.append(opts)
        return "dry run" if (opts or {}).get("dry_run", True) else "PURGED"

    task = tg.Guard(tools=[purge], approver=auto_defer).task("t")
    first = task.call("purge", {"path": "/srv", "opts": {"mode": "fast"}})
    task.approve(first.idempotency_key)
    sent = {"path": "/srv", "opts": {"mode": "fast", "dry_run": None}}
    again = task.call("purge", sent)
    assert again.decision is D.REVIEW and ran == []
    assert task.pending_approvals[again.idempotency_key].args == sent


def test_a_null_kwargs_key_does_not_reach_the_tool() -> None:
    got: list[dict[str, Any]] = []

    @tg.mutating(external=True)
    def pay(order: str, **extra: Any) -> str:
        got.append(extra)
        return "paid"

    task = tg.Guard(tools=[pay]).task("t")
    assert task.call("pay", {"order": "A-1", "refund": None}).decision is D.ALLOW
    assert got == [{}]
    assert task.call("pay", {"order": "A-1"}).decision is D.CACHED  # the same values


def test_a_null_for_a_required_argument_is_its_value() -> None:
    got: list[object] = []

    @tg.mutating
    def tag(label: str | None) -> str:
        got.append(label)
        return "ok"

    task = tg.Guard(tools=[tag]).task("t")
    assert task.call("tag", {"label": None}).decision is D.ALLOW
    assert got == [None]


# -- respellings ------------------------------------------------------------------------------
class Recorder:
    """A tool with every kind of argument; ``received`` holds what each execution got."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []

    def act(self, path: str, dry_run: bool | None = True, opts: dict[str, Any] | None = None,
            count: int = 1, **extra: Any) -> str:
        self.received.append({"path": path, "dry_run": dry_run, "opts": opts, "count": count,
                              "extra": extra})
        return f"done {len(self.received)}"


def same(a: Any, b: Any) -> bool:
    """JSON equality of what a tool received: ``1 == 1.0``, ``True`` is not ``1``, key order
    does not matter, and a null is a value (``{"k": None} != {}``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


LEAF = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["x", "y"]))
OPTS = st.dictionaries(st.sampled_from(["mode", "dry_run", "n"]), LEAF, max_size=3)
ORIGINAL = st.fixed_dictionaries(
    {"path": st.sampled_from(["/srv", "/tmp/a"])},
    optional={"dry_run": st.sampled_from([True, False]), "opts": OPTS,
              "count": st.integers(0, 2), "x": st.integers(0, 1)})


def respell(args: dict[str, Any], rnd: random.Random) -> dict[str, Any] | str:
    """One respelling of ``args``: each change applied with probability one half."""
    out = dict(args)
    if rnd.random() < 0.5:  # an optional argument left out, sent as null
        out[rnd.choice(["dry_run", "opts", "count", "x", "y"])] = None
    if rnd.random() < 0.5:  # an explicit default, or a default left out
        name, default = rnd.choice([("dry_run", True), ("count", 1)])
        if out.get(name) == default:
            del out[name]
        else:
            out.setdefault(name, default)
    opts = out.get("opts")
    if isinstance(opts, dict):
        opts = out["opts"] = dict(opts)
        if rnd.random() < 0.5:  # a null nested in an object
            opts[rnd.choice(["mode", "dry_run", "n"])] = None
        if rnd.random() < 0.5:  # 1.0 for 1
            opts.update({k: float(v) for k, v in opts.items()
                         if type(v) is int and rnd.random() < 0.5})
        if rnd.random() < 0.5:
            out["opts"] = dict(reversed(opts.items()))
    if type(out.get("count")) is int and rnd.random() < 0.5:
        out["count"] = float(out["count"])
    if rnd.random() < 0.5:
        out = dict(reversed(out.items()))
    return orjson.dumps(out).decode() if rnd.random() < 0.3 else out


def received_for(args: dict[str, Any] | str) -> dict[str, Any]:
    """What the tool receives for ``args`` when it runs."""
    tool = Recorder()
    task = tg.Guard(tools=[tg.requires_approval(name="act")(tool.act)],
                    approver=auto_approve).task("t")
    assert task.call("act", args).decision is D.ALLOW
    return tool.received[0]


@settings(max_examples=200, deadline=None)
@given(ORIGINAL, st.lists(st.randoms(use_true_random=False), min_size=1, max_size=4))
def test_no_respelling_runs_on_an_approval_with_other_values(
        original: dict[str, Any], rnds: list[random.Random]) -> None:
    tool = Recorder()
    guard = tg.Guard(tools=[tg.requires_approval(name="act")(tool.act)], approver=auto_defer)
    for i, rnd in enumerate(rnds):
        task = guard.task(f"t{i}")
        first = task.call("act", original)
        assert first.decision is D.REVIEW
        task.approve(first.idempotency_key)
        sent = respell(original, rnd)
        result = task.call("act", sent)
        if result.decision is D.ALLOW:  # it ran on the approval of `original`
            assert same(tool.received.pop(), received_for(original)), sent
        else:
            assert result.decision is D.REVIEW  # asked afresh; the approval stays unspent
            assert task.call("act", original).decision is D.ALLOW
            tool.received.pop()


@settings(max_examples=200, deadline=None)
@given(ORIGINAL, st.lists(st.randoms(use_true_random=False), min_size=1, max_size=4))
def test_no_respelling_is_answered_from_a_result_of_other_values(
        original: dict[str, Any], rnds: list[random.Random]) -> None:
    tool = Recorder()
    guard = tg.Guard(tools=[tg.mutating(name="act", external=True)(tool.act)])
    for i, rnd in enumerate(rnds):
        task = guard.task(f"t{i}")
        assert task.call("act", original).decision is D.ALLOW
        sent = respell(original, rnd)
        result = task.call("act", sent)
        if result.decision is D.CACHED:  # the stored result stands for these values
            assert same(received_for(sent), tool.received[0]), sent
