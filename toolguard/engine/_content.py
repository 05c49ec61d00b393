"""What the model reads back: a tool's result as text, with the guard's notice appended, and
``repr``/``str`` that never raise on a foreign object. Shared by the engine and the agent-loop
helpers (``_loops``)."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["as_text", "safe_repr", "safe_str", "with_notice"]


def safe_repr(value: Any, limit: int = 200) -> str:
    """``repr`` that never raises (a repr that fails, or recurses too deep)."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - any failure of a foreign __repr__
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def safe_str(value: Any) -> str:
    """``str`` that never raises (a foreign ``__str__`` that fails)."""
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - any failure of a foreign __str__
        return f"<{type(value).__name__}>"


def as_text(value: Any) -> str:
    """A result as the model reads it: a string as it is, anything else as JSON (``repr`` for
    what JSON cannot hold)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, default=safe_repr).decode()
    except (TypeError, orjson.JSONEncodeError):
        return safe_repr(value, limit=10_000)


def with_notice(content: Any, notice: str | None) -> Any:
    """``content`` with the guard's notice appended (as text), or as it is without one. A
    result of ``None`` (a tool that returns nothing) is the notice alone: there is no text
    for it to follow, and ``"null"`` would read as a value the tool returned."""
    if not notice:
        return content
    if content is None:
        return f"[toolguard] {notice}"
    return f"{as_text(content)}\n\n[toolguard] {notice}"
