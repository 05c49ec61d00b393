"""Dollar budgets: ``[budget] max_cost_usd`` and ``[tools.NAME] max_cost_usd`` over the tokens
a task reports, priced by genai-prices (the real table) or the host's price function."""

from __future__ import annotations

import json
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import toolguard as tg
from tests.redis_support import delete_prefix, new_prefix, require_redis
from toolguard.engine._cost import NUSD_PER_USD, to_nusd

# genai-prices' gpt-4o: $2.50 per million input tokens, $10 per million output tokens
GPT4O_1000_500 = 0.0075


def guard(budget: dict[str, Any] | None = None, tools: dict[str, Any] | None = None,
          **kw: Any) -> tg.Guard:
    policy = tg.load_policy_dict({"budget": budget or {}, "tools": tools or {}})
    return tg.Guard(policy, tools=[tg.readonly(lookup)], strict_tools=False, **kw)


def lookup(q: str) -> str:
    """A read-only tool."""
    return q


def test_usage_reports_the_cost_from_the_price_table() -> None:
    task = guard().task("t")
    task.record_usage(1000, 500, model="gpt-4o")
    usage = task.usage
    assert usage.cost_usd == pytest.approx(GPT4O_1000_500)
    assert usage.unpriced_tokens == 0
    task.record_usage(10, 0)  # no model: tokens count, their price is unknown
    assert task.usage.unpriced_tokens == 10
    assert task.usage.total_tokens == 1510


def test_a_response_names_its_model() -> None:
    task = guard().task("t")
    task.record_usage({"model": "gpt-4o", "usage": {"prompt_tokens": 1000,
                                                    "completion_tokens": 500}})
    assert task.usage.cost_usd == pytest.approx(GPT4O_1000_500)
    task.record_usage({"model": "claude-sonnet-4-5",
                       "usage": {"input_tokens": 1000, "output_tokens": 500}})
    assert task.usage.cost_usd > GPT4O_1000_500


def test_a_dollar_budget_halts_the_task_and_names_itself() -> None:
    task = guard({"max_cost_usd": 0.01}).task("t")
    task.record_usage(1000, 500, model="gpt-4o")  # $0.0075: within
    with pytest.raises(tg.BudgetExceeded) as caught:
        task.record_usage(1000, 500, model="gpt-4o")  # $0.015
    exc = caught.value
    assert exc.budget == "max_cost_usd"
    assert exc.limit == 0.01
    assert exc.usage == pytest.approx(2 * GPT4O_1000_500)
    assert "budget max_cost_usd exceeded" in exc.reason
    assert task.halted
    assert task.usage.cost_usd == pytest.approx(2 * GPT4O_1000_500)
    # the next call halts too, and says to raise the budget before resuming
    with pytest.raises(tg.BudgetExceeded) as again:
        task.call("lookup", {"q": "x"})
    assert "raise max_cost_usd" in again.value.reason


def test_exactly_the_budget_is_within_it() -> None:
    task = guard({"max_cost_usd": GPT4O_1000_500}).task("t")
    task.record_usage(1000, 500, model="gpt-4o")
    assert not task.halted


def test_unknown_cost_halts_by_default_and_says_why() -> None:
    task = guard({"max_cost_usd": 5}).task("t")
    with pytest.raises(tg.BudgetExceeded) as caught:
        task.record_usage(100, 10, model="no-such-model-xyz")
    assert "cost unknown, no price is known for model 'no-such-model-xyz'" in caught.value.reason
    task = guard({"max_cost_usd": 5}).task("t2")
    with pytest.raises(tg.BudgetExceeded, match=r"model's name was not reported"):
        task.record_usage(100, 10)


def test_unknown_cost_can_be_ignored_and_still_shows() -> None:
    task = guard({"max_cost_usd": 0.01, "unknown_cost": "ignore"}).task("t")
    task.record_usage(10**6, 10**6, model="no-such-model-xyz")
    task.record_usage(1000, 500, model="gpt-4o")
    assert not task.halted
    assert task.usage.unpriced_tokens == 2 * 10**6
    assert task.usage.cost_usd == pytest.approx(GPT4O_1000_500)


def test_no_usage_costs_nothing_and_halts_nothing() -> None:
    task = guard({"max_cost_usd": 0.01}).task("t")
    task.record_usage(0, 0)
    assert not task.halted
    assert task.usage.unpriced_tokens == 0


def test_the_hosts_price_function() -> None:
    seen: list[tuple[str, int, int]] = []

    def price(model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
        seen.append((model, input_tokens, output_tokens))
        return None if model == "mystery" else Decimal("0.000001") * (input_tokens
                                                                       + output_tokens)

    task = guard({"max_cost_usd": 1, "unknown_cost": "ignore"}, price=price).task("t")
    task.record_usage(300, 200, model="in-house")
    task.record_usage(5, 5, model="mystery")
    assert seen == [("in-house", 300, 200), ("mystery", 5, 5)]
    assert task.usage.cost_usd == pytest.approx(0.0005)
    assert task.usage.unpriced_tokens == 10


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "cheap"])
def test_a_price_that_is_no_amount_is_a_clear_error(bad: Any) -> None:
    task = guard(price=lambda *_: bad).task("t")
    with pytest.raises(ValueError, match="a price must be a finite number of dollars"):
        task.record_usage(1, 1, model="m")


def test_a_tools_budget_counts_the_usage_reported_while_it_runs() -> None:
    def summarize(text: str) -> str:
        """Calls a model itself."""
        tg_task.record_usage(1000, 500, model="gpt-4o")
        return text[:3]

    g = tg.Guard(tg.load_policy_dict({"tools": {"summarize": {"max_cost_usd": 0.01}}}),
                 tools=[tg.readonly(summarize)])
    tg_task = g.task("t")
    tg_task.call("summarize", {"text": "first"})
    tg_task.record_usage(10**6, 10**6, model="gpt-4o")  # the agent's own: not the tool's
    assert tg_task.usage.cost_per_tool == {"summarize": pytest.approx(GPT4O_1000_500)}
    assert not tg_task.halted
    # the tool's second model call crosses the budget: the task halts (inside the tool the
    # halt is the tool's error), and the next call raises it
    failed = tg_task.call("summarize", {"text": "second"})
    assert failed.is_error
    assert tg_task.halted
    with pytest.raises(tg.BudgetExceeded) as caught:
        tg_task.call("summarize", {"text": "third"})
    assert caught.value.budget == "max_cost_usd"
    assert "budget tools.summarize.max_cost_usd exceeded" in caught.value.reason


def test_a_tools_budget_by_name() -> None:
    task = guard(tools={"web": {"max_cost_usd": 0.001}}).task("t")
    task.record_usage(100, 10, model="gpt-4o", tool="web")
    with pytest.raises(tg.BudgetExceeded, match=r"tools\.web\.max_cost_usd"):
        task.record_usage(1000, 10, model="gpt-4o", tool="web")


def test_observe_mode_counts_the_cost_and_halts_nothing() -> None:
    policy = tg.load_policy_dict({"mode": "observe", "budget": {"max_cost_usd": 0.001}})
    task = tg.Guard(policy).task("t")
    task.record_usage(1000, 500, model="gpt-4o")
    assert not task.halted
    assert task.usage.cost_usd == pytest.approx(GPT4O_1000_500)


def test_a_dollar_budget_without_a_price_table_is_refused_at_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "genai_prices", None)  # import genai_prices fails
    policy = tg.load_policy_dict({"tools": {"web": {"max_cost_usd": 1}}})
    with pytest.raises(tg.PolicyError, match=r"tools\.web\.max_cost_usd: a dollar budget "
                                             r"needs a price table: pip install"):
        tg.Guard(policy, strict_tools=False)
    tg.Guard(policy, strict_tools=False, price=lambda *_: 0.0)  # the host's prices do
    # without a budget, usage is reported without a price
    task = tg.Guard().task("t")
    task.record_usage(5, 5, model="gpt-4o")
    assert task.usage.unpriced_tokens == 10


def test_the_schema_refuses_a_budget_of_nothing() -> None:
    with pytest.raises(tg.PolicyError, match=r"budget\.max_cost_usd: must be a number > 0"):
        tg.load_policy_dict({"budget": {"max_cost_usd": 0}})
    with pytest.raises(tg.PolicyError, match=r"budget\.unknown_cost: must be one of"):
        tg.load_policy_dict({"budget": {"unknown_cost": "maybe"}})


@pytest.mark.redis
def test_tasks_on_redis_share_one_dollar_budget() -> None:
    from toolguard.stores.redis import RedisStore

    url, prefix = require_redis(), new_prefix()
    stores = [RedisStore(url=url, key_prefix=prefix) for _ in range(2)]
    try:
        policy = tg.load_policy_dict({"budget": {"max_cost_usd": 0.01}})
        a, b = (tg.Guard(policy, store=s).task("shared") for s in stores)
        a.record_usage(1000, 500, model="gpt-4o")
        assert b.usage.cost_usd == pytest.approx(GPT4O_1000_500)
        with pytest.raises(tg.BudgetExceeded):
            b.record_usage(1000, 500, model="gpt-4o")
        assert a.halted
    finally:
        delete_prefix(prefix)


@given(st.decimals(min_value=0, max_value=10**9, allow_nan=False, allow_infinity=False,
                   places=12))
def test_a_cost_in_nano_dollars_never_undercounts(usd: Decimal) -> None:
    nusd = to_nusd(usd)
    assert nusd >= usd * NUSD_PER_USD > nusd - 1


def test_replay_reports_the_cost_and_a_dollar_budget_halts_a_run(tmp_path: Path) -> None:
    from toolguard.replay import read_runs, replay_runs
    from toolguard.replay._report import to_json

    trace = tmp_path / "run.jsonl"
    lines = [{"run": "priced"},
             {"tool": "lookup", "args": {"q": "a"}, "result": "x", "model": "gpt-4o",
              "usage": {"input_tokens": 1000, "output_tokens": 500}},
             {"tool": "lookup", "args": {"q": "b"}, "result": "y",
              "usage": {"input_tokens": 1000, "output_tokens": 500, "model": "gpt-4o"}},
             {"tool": "lookup", "args": {"q": "c"}, "result": "z"},
             {"run": "unnamed"},
             {"tool": "lookup", "args": {"q": "a"}, "result": "x",
              "usage": {"input_tokens": 7, "output_tokens": 3}}]
    trace.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    runs, problems = read_runs([trace])
    assert problems == []
    report = to_json(replay_runs(runs))
    priced, unnamed = (r["summary"] for r in report["runs"])
    assert (priced["tokens"], priced["cost_usd"], priced["unpriced_tokens"]) == (
        3000, pytest.approx(2 * GPT4O_1000_500), 0)
    assert (unnamed["tokens"], unnamed["cost_usd"], unnamed["unpriced_tokens"]) == (10, 0, 10)
    assert report["totals"]["cost_usd"] == pytest.approx(2 * GPT4O_1000_500)
    # under a dollar budget the priced run halts at its second call's usage
    policy = tg.load_policy_dict({"budget": {"max_cost_usd": 0.01, "unknown_cost": "ignore"}})
    runs, _ = read_runs([trace])
    report = to_json(replay_runs(runs, policy))
    priced, unnamed = (r["summary"] for r in report["runs"])
    assert priced["halt"] is True
    assert priced["halted_at"] == 1
    assert "budget max_cost_usd exceeded" in priced["halt_reason"]
    assert unnamed["halt"] is False
