"""Model usage a host reports: :meth:`Task.record_usage <toolguard.Task.record_usage>`'s
counting of tokens, their price by the guard's price function, and the halt when a token
or dollar budget is exceeded (a halt no call caused: the usage did).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, cast

from toolguard._errors import BudgetExceeded
from toolguard._types import ENFORCE, HALT
from toolguard.tools._context import CURRENT_KEY

from . import _events
from ._cost import genai_price, model_of, to_nusd, to_usd
from ._loops import usage_tokens

if TYPE_CHECKING:
    from ._call import GuardState, TaskState

__all__ = ["record_usage"]


def record_usage(task: TaskState, input_tokens: int | Any, output_tokens: int, model: str | None,
                 tool: str | None) -> None:
    """``Task.record_usage``: add the tokens and their price to the task's counters, then
    halt it if a budget is exceeded (see that method for the arguments and errors)."""
    if not isinstance(input_tokens, int | float | str | bytes | type(None)):
        # a response or usage object (a count of the wrong type stays a ValueError)
        if output_tokens:
            raise TypeError("pass a response (or usage) alone, or two token counts")
        model = model or model_of(input_tokens)
        input_tokens, output_tokens = usage_tokens(input_tokens)
    for name, value in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name} must be an integer ≥ 0, got {value!r}")
    guard, now = task.guard, task.guard._clock()
    inputs = cast(int, input_tokens)
    total = guard._store.add_usage(task.task_id, inputs, output_tokens, now)
    tool = _usage_tool(task) if tool is None else tool
    cost: int | None = 0
    task_nusd = tool_nusd = 0
    if inputs or output_tokens:
        cost = _price(guard, model, inputs, output_tokens)
        task_nusd, tool_nusd = guard._store.add_cost(
            task.task_id, cost or 0, inputs + output_tokens if cost is None else 0, tool, now)
    policy = guard._config.policy
    if policy.mode is not ENFORCE:
        return
    limit = policy.budget.max_tokens
    if limit is not None and total > limit:
        _halt_budget(task, "max_tokens", "budget max_tokens exceeded: too many tokens "
                     f"(limit {limit}, used {total})", limit, total, "")
    tool_policy = policy.tools.get(tool) if tool else None
    for name, limit_usd, used in (
            ("max_cost_usd", policy.budget.max_cost_usd, task_nusd),
            (f"tools.{tool}.max_cost_usd", tool_policy.max_cost_usd if tool_policy else None,
             tool_nusd)):
        if limit_usd is None:
            continue
        if cost is None and policy.budget.unknown_cost == "halt":
            why = ("the model's name was not reported (record_usage(model=...))"
                   if model is None else f"no price is known for model {model!r}")
            _halt_budget(task, "max_cost_usd", f"budget {name}: cost unknown, {why} "
                         '(budget.unknown_cost = "halt")', limit_usd, to_usd(used), tool)
        if used > to_nusd(limit_usd):
            _halt_budget(task, "max_cost_usd", f"budget {name} exceeded: "
                         f"too many dollars (limit {limit_usd}, used "
                         f"{to_usd(used):.6f})", limit_usd, to_usd(used), tool)


def _price(guard: GuardState, model: str | None, input_tokens: int, output_tokens: int
           ) -> int | None:
    """Nano-dollars of the tokens by the guard's price function; None if unknown."""
    if model is None:
        return None
    price = guard._price or genai_price
    usd = price(model, input_tokens, output_tokens)
    return None if usd is None else to_nusd(usd)


def _usage_tool(task: TaskState) -> str:
    """The guarded tool of ``task`` running in this context (its idempotency key is
    ``task:tool:hash``), or ``""``."""
    running = CURRENT_KEY.get()
    prefix = f"{task.task_id}:"
    if running is None or not running[0].startswith(prefix):
        return ""
    return running[0][len(prefix):].rpartition(":")[0]


def _halt_budget(task: TaskState, budget: str, reason: str, limit: float, used: float, tool: str
                 ) -> NoReturn:
    """Halt the task on a budget (``max_tokens``, ``max_cost_usd``) that reported usage,
    not a call, exceeded."""
    task.guard._store.set_halted(task.task_id, {
        "kind": "BudgetExceeded", "reason": reason, "budget": budget,
        "limit": limit, "usage": used})
    _events.event(task, "planning->failed", tool, HALT, reason,  # no call: the usage halted it
                extra={"halt": "BudgetExceeded", "budget": budget})
    raise BudgetExceeded(reason, budget=budget, limit=limit, usage=used,
                         task_id=task.task_id, tool=tool)
