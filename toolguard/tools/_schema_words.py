"""How the problems of invalid arguments are worded for the model: jsonschema's words, whether
jsonschema-rs (the common case) or pure-Python jsonschema (where no wheel exists) found them,
each at its path (``args.flights[1].flight_number: 28 is not of type 'string'``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = ["Problem", "Scrub", "describe", "python_problem", "rs_problems"]

_MAX_ERRORS = 8


def _leaves(error: ValidationError) -> list[ValidationError]:
    """The errors to report for ``error``: itself, or, for an ``anyOf``/``oneOf`` whose
    branch the value matched by type and failed inside (``tags: list[str] | None`` given
    ``[1, 2]``), every error of that branch, found by jsonschema's ``best_match``, so each
    failing path is named (``args.tags[0]: 1 is not of type 'string'``). Built only for
    invalid arguments."""
    if not error.context:
        return [error]
    from jsonschema.exceptions import best_match

    best = best_match([error])
    if best is None or len(best.absolute_path) <= len(error.absolute_path):
        return [error]  # no branch got further than the value itself: say what each wanted
    while best.parent is not None and best.parent is not error:
        best = best.parent
    branch = best.relative_schema_path[0]
    return [leaf for inner in error.context if inner.relative_schema_path[0] == branch
            for leaf in _leaves(inner)]


def _message(error: ValidationError) -> str:
    """jsonschema's message, except for an ``anyOf``/``oneOf`` every branch of which wants
    another type: then the types (``'x' is not of type 'array' or 'null'``)."""
    context = error.context or []
    if context and all(e.validator == "type" and not e.relative_path for e in context):
        wanted = dict.fromkeys(repr(t) for e in context for t in (
            e.validator_value if isinstance(e.validator_value, list) else [e.validator_value]))
        return f"{error.instance!r} is not of type {' or '.join(wanted)}"
    return str(error.message)


def _path_of(parts: Any) -> str:
    """``args.flights[1].flight_number`` for the instance path ``["flights", 1, ...]``."""
    out = "args"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# jsonschema's own wording per keyword (jsonschema/_keywords.py), rebuilt from the structured
# errors of jsonschema-rs, so the model reads one shape whichever validator found the problem.
_LIMIT_WORDS = {
    "Minimum": "is less than the minimum of",
    "Maximum": "is greater than the maximum of",
    "ExclusiveMinimum": "is less than or equal to the minimum of",
    "ExclusiveMaximum": "is greater than or equal to the maximum of",
}
_SIZE_WORDS = {  # kind: (the word at the edge limit, the edge limit, the word otherwise)
    "MinLength": ("should be non-empty", 1, "is too short"),
    "MinItems": ("should be non-empty", 1, "is too short"),
    "MinProperties": ("should be non-empty", 1, "does not have enough properties"),
    "MaxLength": ("is expected to be empty", 0, "is too long"),
    "MaxItems": ("is expected to be empty", 0, "is too long"),
    "MaxProperties": ("is expected to be empty", 0, "has too many properties"),
}
_BRANCHING = frozenset({"AnyOf", "OneOfNotValid"})


def _rs_kind(error: Any) -> str:
    return type(error.kind).__name__


def _rs_leaves(error: Any) -> list[Any]:
    """The jsonschema-rs errors to report for ``error``, as ``_leaves`` chooses them: for an
    ``anyOf``/``oneOf`` whose branch the value matched by type and failed inside, that
    branch's errors (the branch whose errors reach deepest; the first of equals)."""
    if _rs_kind(error) not in _BRANCHING:
        return [error]
    depth = len(error.instance_path)
    best: list[Any] = []
    best_depth = depth
    for branch in error.kind.context:
        reach = max((len(e.instance_path) for e in branch), default=depth)
        if reach > best_depth:
            best, best_depth = branch, reach
    if not best:
        return [error]
    return [leaf for inner in best for leaf in _rs_leaves(inner)]


def _rs_message(error: Any) -> str:
    """jsonschema's message for one jsonschema-rs error (its own message for a keyword that
    jsonschema words differently or the table does not cover)."""
    kind = _rs_kind(error)
    data = error.kind.as_dict()
    value = error.instance
    if kind == "Type":
        return f"{value!r} is not of type {', '.join(repr(t) for t in data['types'])}"
    if kind == "Required":
        return f"{data['property']!r} is a required property"
    if kind == "Enum":
        return f"{value!r} is not one of {data['options']!r}"
    if kind == "Constant":
        return f"{data['expected_value']!r} was expected"
    if kind in _LIMIT_WORDS:
        return f"{value!r} {_LIMIT_WORDS[kind]} {data['limit']!r}"
    if kind in _SIZE_WORDS:
        at_edge, edge, word = _SIZE_WORDS[kind]
        return f"{value!r} {at_edge if data['limit'] == edge else word}"
    if kind == "Pattern":
        return f"{value!r} does not match {data['pattern']!r}"
    if kind == "MultipleOf":
        return f"{value!r} is not a multiple of {data['multiple_of']}"
    if kind == "UniqueItems":
        return f"{value!r} has non-unique elements"
    if kind == "AdditionalProperties":
        extras = sorted(data["unexpected"], key=str)
        verb = "was" if len(extras) == 1 else "were"
        return (f"Additional properties are not allowed "
                f"({', '.join(repr(e) for e in extras)} {verb} unexpected)")
    if kind in _BRANCHING:
        inner = [e for branch in error.kind.context for e in branch]
        if inner and all(_rs_kind(e) == "Type" and e.instance_path == error.instance_path
                         for e in inner):
            wanted = dict.fromkeys(repr(t) for e in inner for t in e.kind.as_dict()["types"])
            return f"{value!r} is not of type {' or '.join(wanted)}"
        return f"{value!r} is not valid under any of the given schemas"
    return str(error.message)


Problem = tuple[list[Any] | None, str, Any]
"""One problem of invalid arguments: the instance path (``["flights", 1]``; ``None`` for a
schema that cannot be applied, the only problem then), the message, and the offending value
the message may quote."""
Scrub = Callable[[str, list[Any], Any], str]
"""``scrub(message, path, quoted)``: a problem's message as the model may read it."""


def describe(problems: list[Problem], scrub: Scrub | None = None) -> str:
    """The model's message for ``problems``: ``args.path: message`` each, ordered by path and
    then by message (the two validators visit a schema's keywords in different orders), at
    most ``_MAX_ERRORS`` of them and a count of the rest; ``scrub`` (the guard takes secrets
    out of the values the messages quote) applied to each shown message."""
    problems = sorted(problems, key=lambda p: (p[0] or [], p[1]))
    lines = [message if path is None
             else f"{_path_of(path)}: {scrub(message, path, quoted) if scrub else message}"
             for path, message, quoted in problems[:_MAX_ERRORS]]
    if len(problems) > _MAX_ERRORS:
        lines.append(f"... and {len(problems) - _MAX_ERRORS} more")
    return "; ".join(lines)


def rs_problems(top: Any) -> list[Problem]:
    """The problems to report for one jsonschema-rs error."""
    return [(list(e.instance_path), _rs_message(e), e.instance) for e in _rs_leaves(top)]


def python_problem(top: ValidationError) -> list[Problem]:
    """The problems to report for one jsonschema error."""
    return [(list(e.absolute_path), _message(e), e.instance) for e in _leaves(top)]
