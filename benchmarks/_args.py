"""The arguments and no-op tools the benchmarks call, at three sizes.

* ``small``: ~60 B, three flat arguments (``read_file(path, limit, recursive)``);
* ``medium``: ~1 KB, nested objects and arrays (``search(query, filters, options,
  context)``), without nulls: the canonical hash stays on its one-pass orjson path;
* ``medium_nulls``: the same with three nulls inside (the canonical form drops them, which
  takes the Python walk);
* ``large``: ~100 KB, an array of 600 records (``write_rows(table, rows)``).

Every tool has type hints, so the guard derives an argument schema from them (nested
``TypedDict`` schemas for the medium and large tools) exactly as it does for user tools.
``distinct(size, i)`` returns the ``i``-th of many distinct argument sets of one size (for
the allow path without repeats); they share the bulky parts, so a pool of them is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson
from typing_extensions import NotRequired, TypedDict  # pydantic needs it on Python < 3.12

__all__ = ["SIZES", "Sized", "args_for", "distinct", "invalid", "json_bytes", "sized"]


class DateRange(TypedDict):
    start: str
    end: str
    timezone: NotRequired[str | None]


class Filters(TypedDict):
    regions: list[str]
    date_range: DateRange
    tags: list[str]
    min_score: float
    include_archived: bool
    owner: NotRequired[str | None]


class SortKey(TypedDict):
    field: str
    descending: bool


class Options(TypedDict):
    limit: int
    offset: int
    sort: list[SortKey]
    fields: list[str]
    highlight: bool
    cursor: NotRequired[str | None]


class Message(TypedDict):
    role: str
    text: str


class Row(TypedDict):
    id: int
    name: str
    email: str
    score: float
    tags: list[str]
    active: bool


# -- the no-op tools (sync and async, one signature per size) ---------------------------------
def read_file(path: str, limit: int, recursive: bool) -> None:
    """Read a file (no-op)."""


async def read_file_async(path: str, limit: int, recursive: bool) -> None:
    """Read a file (no-op)."""


def search(query: str, filters: Filters, options: Options, context: list[Message]) -> None:
    """Search documents (no-op)."""


async def search_async(query: str, filters: Filters, options: Options,
                       context: list[Message]) -> None:
    """Search documents (no-op)."""


def write_rows(table: str, rows: list[Row]) -> None:
    """Write rows to a table (no-op)."""


async def write_rows_async(table: str, rows: list[Row]) -> None:
    """Write rows to a table (no-op)."""


# -- arguments --------------------------------------------------------------------------------
def _small(i: int | None = None) -> dict[str, Any]:
    path = "/srv/data/report.csv" if i is None else f"/srv/data/report_{i}.csv"
    return {"path": path, "limit": 100, "recursive": False}


_FILTERS: Filters = {
    "regions": ["emea", "apac", "amer", "latam", "anz"],
    "date_range": {"start": "2024-01-01T00:00:00Z", "end": "2024-12-31T23:59:59Z"},
    "tags": ["finance", "quarterly", "revenue", "audited", "board", "forecast", "pipeline",
             "churn", "retention", "pricing"],
    "min_score": 0.75,
    "include_archived": False,
}
_OPTIONS: Options = {
    "limit": 50,
    "offset": 0,
    "sort": [{"field": "score", "descending": True}, {"field": "updated_at", "descending": True},
             {"field": "title", "descending": False}],
    "fields": ["id", "title", "summary", "owner", "region", "updated_at", "score", "url"],
    "highlight": True,
}
_CONTEXT: list[Message] = [
    {"role": "user", "text": "Which regions grew fastest last year, and what drove it?"},
    {"role": "assistant", "text": "I will search the quarterly finance reports for revenue "
                                  "growth by region and summarise the main drivers."},
    {"role": "user", "text": "Focus on audited numbers and ignore drafts or forecasts."},
]


def _medium(i: int | None = None, nulls: bool = False) -> dict[str, Any]:
    query = "revenue growth by region, audited figures only"
    if i is not None:
        query += f" #{i}"
    filters: dict[str, Any] = dict(_FILTERS)
    options: dict[str, Any] = dict(_OPTIONS)
    if nulls:
        filters["owner"] = None  # nulls inside objects: dropped by the canonical form
        options["cursor"] = None
        filters["date_range"] = {**_FILTERS["date_range"], "timezone": None}
    return {"query": query, "filters": filters, "options": options, "context": _CONTEXT}


def _row(k: int) -> Row:
    return {
        "id": 100_000 + k,
        "name": f"customer {k:05d} of the northern sales region",
        "email": f"customer{k:05d}@example.com",
        "score": round(0.5 + (k % 97) / 211, 4) + 0.0001,  # never an integral float
        "tags": ["active", "priority", f"cohort{k % 12}"],
        "active": k % 3 != 0,
    }


_ROWS: list[Row] = [_row(k) for k in range(600)]


def _large(i: int | None = None) -> dict[str, Any]:
    return {"table": "customers" if i is None else f"customers_{i}", "rows": _ROWS}


class Sized:
    """One argument size: its builders and its tools."""

    def __init__(self, name: str, build: Callable[[int | None], dict[str, Any]],
                 tool: Callable[..., Any], tool_async: Callable[..., Any]) -> None:
        self.name = name
        self.build = build
        self.tool = tool
        self.tool_async = tool_async


SIZES: dict[str, Sized] = {
    "small": Sized("small", _small, read_file, read_file_async),
    "medium": Sized("medium", _medium, search, search_async),
    "medium_nulls": Sized("medium_nulls", lambda i: _medium(i, nulls=True), search,
                          search_async),
    "large": Sized("large", _large, write_rows, write_rows_async),
}


def sized(size: str) -> Sized:
    """The :class:`Sized` called ``size``."""
    return SIZES[size]


def args_for(size: str) -> dict[str, Any]:
    """The one (repeated) argument set of ``size``."""
    return SIZES[size].build(None)


def distinct(size: str, i: int) -> dict[str, Any]:
    """The ``i``-th distinct argument set of ``size``."""
    return SIZES[size].build(i)


def invalid(size: str) -> dict[str, Any]:
    """The arguments of ``size`` with their last integer (in document order; for ``large`` the
    id of the 600th row, at the end of 100 KB) given as a string: one problem, found only by
    walking the whole value."""
    def broken(value: Any) -> tuple[Any, bool]:
        if isinstance(value, dict):
            items = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            is_int = isinstance(value, int) and not isinstance(value, bool)
            return (str(value) if is_int else value), is_int
        for key, child in reversed(items):
            new, done = broken(child)
            if done:
                copy: Any = dict(value) if isinstance(value, dict) else list(value)
                copy[key] = new
                return copy, True
        return value, False

    args, done = broken(args_for(size))
    assert done, f"the {size} arguments hold no integer"
    return cast("dict[str, Any]", args)


def json_bytes(value: Any) -> int:
    """Length of the sorted compact JSON of ``value``, in bytes."""
    return len(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
