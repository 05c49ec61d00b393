"""Building a registered tool's entry: the policy's per-argument options and rules must
name arguments the tool has, and problems say where a value was set."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from toolguard._errors import (
    PolicyError,
    PolicyProblem,
)

from ._resolve import ToolSettings

if TYPE_CHECKING:
    from toolguard.policy._model import Policy


def _check_argument_names(settings: ToolSettings, schema: Mapping[str, Any]) -> ToolSettings:
    """The policy's per-argument options and rules must name arguments the tool has: one
    that names none would silently do nothing (an ``ignore`` that ignores nothing splits one
    call into many signatures). An environment variable spells names in any case
    (``..._ARGS__REQUESTID__IGNORE``): it is matched to the argument without regard to case.

    Raises:
        PolicyError: a name the tool's arguments do not have (unless it takes ``**kwargs``).
    """
    properties = schema.get("properties")
    if not isinstance(properties, dict) or schema.get("additionalProperties", True) is not False:
        return settings  # **kwargs (or a schema that allows more): any name may come
    known = list(properties)
    by_case: dict[str, list[str]] = {}
    for name in known:
        by_case.setdefault(name.casefold(), []).append(name)
    problems: list[PolicyProblem] = []
    options = dict(settings.args)
    for name in list(options):
        if name in properties:
            continue
        source = settings.sources.get("args", "")
        spelled = by_case.get(name.casefold(), [])
        if source.startswith("env ") and len(spelled) == 1:
            options[spelled[0]] = options.pop(name)
            continue
        problems.append(PolicyProblem(source or "<policy>", f"tools.{settings.name}.args.{name}",
                                      _no_such_argument(name, known)))
    for i, rule in enumerate(settings.rules):
        for name, _ in rule.compiled:
            if name not in properties:
                problems.append(PolicyProblem(
                    settings.sources.get("rules", "<policy>"),
                    f"tools.{settings.name}.rules[{i}].match.{name}",
                    _no_such_argument(name, known)))
    if problems:
        raise PolicyError(problems)
    return settings if options == settings.args else replace(settings, args=options)


def _no_such_argument(name: str, known: list[str]) -> str:
    hint = _close_names(name, dict.fromkeys(known)).rstrip()
    return (f"the tool has no argument {name!r} (its arguments: {', '.join(known)})"
            + (f"; {hint}" if hint else ""))


def _source(policy: Policy, path: str) -> str:
    """Where ``path`` was set, for a problem report: the file or ``env VAR``."""
    found = policy.source_of(path)
    if found != "built-in":
        return found
    return policy.sources[-1] if policy.sources else "<policy>"


def _close_names(name: str, entries: Mapping[str, Any]) -> str:
    """``"did you mean 'x'? "`` when one of ``entries`` (tool or argument names) is close to
    ``name``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(name, list(entries), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def _required(schema: Mapping[str, Any], signature: inspect.Signature | None,
              injected: frozenset[str]) -> frozenset[str]:
    """The arguments a tool requires: its schema's ``required`` names, and the parameters of
    its signature that have no default (not ``*args`` / ``**kwargs``, not injected ones)."""
    listed = schema.get("required")
    names = {n for n in listed if isinstance(n, str)} if isinstance(listed, list) else set()
    if signature is not None:
        names.update(name for name, p in signature.parameters.items()
                     if p.default is p.empty and name not in injected
                     and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    return frozenset(names)
