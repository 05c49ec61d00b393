"""Dollar budgets: the price of the model tokens a task reports (``[budget] max_cost_usd``,
``[tools.NAME] max_cost_usd``).

A price comes from a *price function* ``price(model, input_tokens, output_tokens)`` returning
US dollars (``float`` or ``Decimal``) or ``None`` when the model's price is unknown. The
default is :func:`genai_price`, on the ``genai-prices`` table (the one pydantic-ai uses;
extra ``agent-toolguard[prices]``); a host passes its own as ``Guard(price=...)`` (negotiated
rates, a model of its own). Costs are kept as integers of nano-dollars (1e-9 USD, rounded
up), so stores add them exactly and a 64-bit counter holds about 9.2e9 dollars.

Tokens whose price is unknown (no model name given, or one the table does not know) are
counted as ``unpriced_tokens``; ``[budget] unknown_cost`` says whether a dollar budget then
halts the task (``"halt"``, the default: a guard that cannot count the cost fails closed) or
ignores them (``"ignore"``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, Final

from toolguard._errors import PolicyError, PolicyProblem

if TYPE_CHECKING:
    from toolguard.policy._model import Policy

__all__ = ["NUSD_PER_USD", "Price", "genai_price", "model_of", "to_nusd", "to_usd"]

Price = Callable[[str, int, int], "float | Decimal | None"]
"""``price(model, input_tokens, output_tokens)``: US dollars, or ``None`` if unknown."""

NUSD_PER_USD: Final = 10**9


def genai_price(model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
    """The price of ``input_tokens`` and ``output_tokens`` of ``model`` from the
    ``genai-prices`` table (``calc_price``, the provider inferred from the model name, or
    given as ``"provider:model"``, e.g. ``"openai:gpt-4o"``), or ``None`` for a model it
    does not know, or when ``genai-prices`` is not installed (a policy with a dollar budget
    is refused at load then: :func:`check_prices`).
    """
    try:
        import genai_prices
    except ImportError:
        return None
    provider, _, name = model.partition(":") if ":" in model else (None, "", model)
    usage = genai_prices.Usage(input_tokens=input_tokens, output_tokens=output_tokens)
    try:
        return genai_prices.calc_price(usage, name, provider_id=provider).total_price
    except LookupError:
        return None


def check_prices(policy: Policy, price: Price | None) -> None:
    """Refuse, at policy load, a dollar budget with no way to price it.

    Raises:
        PolicyError: the policy sets ``max_cost_usd`` (its ``[budget]``'s or a tool's), no
            price function was given and ``genai-prices`` cannot be imported.
    """
    if price is not None:
        return
    where = ["budget.max_cost_usd"] if policy.budget.max_cost_usd is not None else []
    where += [f"tools.{name}.max_cost_usd" for name, tp in policy.tools.items()
              if tp.max_cost_usd is not None]
    if not where:
        return
    try:
        import genai_prices  # noqa: F401 - only whether it imports
    except ImportError:
        raise PolicyError([PolicyProblem(
            policy.source_of(where[0]), where[0],
            "a dollar budget needs a price table: pip install 'agent-toolguard[prices]' "
            "(genai-prices), or pass Guard(price=...)")]) from None


def to_nusd(usd: float | Decimal) -> int:
    """US dollars as nano-dollars, rounded up (a budget never undercounts).

    Raises:
        ValueError: ``usd`` is negative, not finite, or not a number.
    """
    try:
        value = Decimal(usd) if not isinstance(usd, Decimal) else usd
        nusd = int((value * NUSD_PER_USD).to_integral_value(ROUND_CEILING))
    except (InvalidOperation, TypeError, ValueError, OverflowError):
        raise ValueError(f"a price must be a finite number of dollars ≥ 0, got {usd!r}"
                         ) from None
    if nusd < 0 or (isinstance(usd, float) and not math.isfinite(usd)):
        raise ValueError(f"a price must be a finite number of dollars ≥ 0, got {usd!r}")
    return nusd


def to_usd(nusd: int) -> float:
    """Nano-dollars as US dollars."""
    return nusd / NUSD_PER_USD


def model_of(response: Any) -> str | None:
    """The model name an SDK response (or a dict of one) carries in ``model``, or ``None``."""
    model = response.get("model") if isinstance(response, dict) else getattr(
        response, "model", None)
    return model if isinstance(model, str) and model else None
