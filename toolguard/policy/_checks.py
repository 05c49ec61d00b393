"""The checks of a policy load: stage 3 (each layer against the shipped JSON Schema, with
"what was expected" messages) and stage 5 (semantics the schema cannot express: ladder order
across effects and overrides, approvals, lifetimes, cluster URLs, regular expressions, values
such as ``inf``). Every problem is located through :class:`~toolguard.policy._layers._Layer`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, ValidationError

from toolguard._errors import PolicyProblem
from toolguard.hashing._normalize import field_path_problem
from toolguard.hashing._regex import pattern_problem

from ._ladder_order import LADDER_KEYS as _LADDER_KEYS
from ._ladder_order import out_of_order as _out_of_order
from ._ladder_order import override_order_problems
from ._layers import _BUILT_IN, KeyPath, _display, _Layer, _leaves

_LADDER_EFFECTS = ("readonly", "mutating")

# --- stage 3: the JSON Schema ----------------------------------------------------------------


@cache
def _schema_text() -> str:
    return (resources.files("toolguard") / "policy.schema.json").read_text(encoding="utf-8")


@cache
def _validator() -> Draft202012Validator:
    return Draft202012Validator(policy_schema())


def _schema_problems(layer: _Layer) -> list[PolicyProblem]:
    """Every schema violation in ``layer``, each with what was expected."""
    problems: list[PolicyProblem] = []
    for error in _validator().iter_errors(layer.data):
        path: KeyPath = tuple(error.absolute_path)
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        if (isinstance(error.instance, float) and not math.isfinite(error.instance)
                and {"integer", "number"} & set(_types(schema))):
            continue  # inf, nan: "must be a finite number", once, from _value_problems
        if error.validator == "additionalProperties" and error.validator_value is False:
            allowed = list(schema.get("properties", {}))
            for key in error.instance:
                if key not in allowed:
                    message = f"unknown key {key!r} (allowed: {', '.join(allowed)})"
                    problems.append(layer.problem((*path, key), message))
        elif "propertyNames" in error.schema_path:  # [tools.""]: the key is the problem
            problems.append(layer.problem((*path, error.instance),
                                          f"must be a non-empty tool name, got "
                                          f"{_show(error.instance)}"))
        elif error.validator == "required":
            for key in error.validator_value:
                if key not in error.instance:
                    problems.append(layer.problem(path, f"missing required key {key!r}"))
        else:
            problems.append(layer.problem(path, _expected_message(error, schema)))
    return problems


def _expected_message(error: ValidationError, schema: Mapping[str, Any]) -> str:
    if error.validator in {"type", "enum", "minimum", "exclusiveMinimum"}:
        return f"must be {_expected(schema)}, got {_show(error.instance)}"
    if error.validator == "maximum":
        return f"must be {_at_most(schema)}, got {_show(error.instance)}"
    if error.validator == "pattern" and "timeout_exceptions" in error.absolute_path:
        return (f"must be an exception class name (Name, module.Qualname or Name:STATUS; "
                f"dotted Python identifiers), got {_show(error.instance)}")
    if error.validator == "pattern" and isinstance(error.instance, str):  # ignore_fields
        why = field_path_problem(error.instance) or f"must match {error.validator_value}"
        return f"{why}, got {_show(error.instance)}"  # as _regex_problems says it: once
    if error.validator == "not" and isinstance(error.instance, str):  # a Regex: as RE2 says
        why = pattern_problem(error.instance) or (
            "uses lookaround or a backreference, which the linear-time regex engine (RE2) "
            "does not support")
        return f"{why}, got {_show(error.instance)}"
    if error.validator == "minLength" and error.instance == "":
        return 'must be a non-empty string, got ""'
    return error.message  # pragma: no cover - the schema uses no other keyword


_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "string": "a string",
    "object": "a table",
    "array": "an array",
}


def _expected(schema: Mapping[str, Any]) -> str:
    """What a (sub)schema accepts, in words: ``an integer ≥ 2``, ``one of "a", "b"``."""
    if "enum" in schema:
        options = [json.dumps(v) for v in schema["enum"] if v is not None]
        return "one of " + ", ".join(options)
    types = [t for t in _types(schema) if t != "null"]
    words = " or ".join(_TYPE_NAMES.get(t, t) for t in types)
    items = schema.get("items")
    if isinstance(items, Mapping) and "$ref" in items:  # "#/$defs/Regex": a string
        items = policy_schema()["$defs"].get(str(items["$ref"]).rsplit("/", 1)[-1], items)
    if "array" in types and isinstance(items, Mapping) and items.get("type") == "string":
        words += " of strings"
    if "minimum" in schema:
        words += f" ≥ {schema['minimum']}"
    if "exclusiveMinimum" in schema:
        words += f" > {schema['exclusiveMinimum']}"
    return words


def _at_most(schema: Mapping[str, Any]) -> str:
    """The upper bound of a count (what a 64-bit counter holds, in a store or elsewhere) or
    of a duration (beyond it, timers and sockets overflow)."""
    if "integer" in _types(schema):
        return "an integer below 2**63"
    bound = f"{schema['maximum']:.0e}".replace("e+0", "e").replace("e+", "e")
    return f"at most {bound} seconds (about 31 years)"


def _types(schema: Mapping[str, Any]) -> list[str]:
    """A (sub)schema's ``type`` as a list."""
    types = schema.get("type", [])
    return [types] if isinstance(types, str) else list(types)


def _show(value: Any, limit: int = 60) -> str:
    """A value as TOML-ish text for a message (JSON spelling: ``"three"``, ``true``)."""
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- stage 5: semantic checks ----------------------------------------------------------------


_REDIS_SCHEMES: Final = ("redis://", "rediss://", "unix://")


def _value_problems(layer: _Layer) -> list[PolicyProblem]:
    """Values the JSON Schema cannot rule out: TOML's ``inf`` and ``nan`` (a limit of
    infinity is "no limit", which is spelled by leaving the key out), and a store URL that
    is neither a Redis URL nor a usable ``sqlite:`` URL."""
    problems: list[PolicyProblem] = []
    for path in _leaves(layer.data):
        value: Any = layer.data
        for key in path:
            value = value[key]
        if isinstance(value, float) and not math.isfinite(value):
            problems.append(layer.problem(
                path, f"must be a finite number (leave the key out for no limit), got {value}"))
    store = layer.data.get("store")
    url = store.get("url") if isinstance(store, dict) else None
    if isinstance(url, str) and url.startswith("sqlite:"):
        from toolguard.stores.sqlite import path_from_url

        try:
            path_from_url(url)
        except ValueError as exc:
            problems.append(layer.problem(("store", "url"), str(exc)))
    elif isinstance(url, str) and not url.startswith(_REDIS_SCHEMES):
        problems.append(layer.problem(
            ("store", "url"), f"must be a Redis URL ({', '.join(_REDIS_SCHEMES)}...) or a "
                              f"SQLite file (sqlite:///PATH), got {_show(url)}"))
    return problems


def _result_tables(layer: _Layer) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each ``[tools.X.result]`` table of ``layer``, with its tool's name."""
    tools = layer.data.get("tools")
    for name, tool in tools.items() if isinstance(tools, dict) else ():
        table = tool.get("result") if isinstance(tool, dict) else None
        if isinstance(table, dict):
            yield name, table


def _regex_problems(layer: _Layer) -> list[PolicyProblem]:
    """Every regular expression in ``layer`` that does not compile."""
    candidates: list[tuple[KeyPath, Any]] = []
    audit = layer.data.get("audit")
    if isinstance(audit, dict) and isinstance(audit.get("redact"), list):
        candidates += [(("audit", "redact", i), p) for i, p in enumerate(audit["redact"])]
    tools = layer.data.get("tools")
    for name, tool in tools.items() if isinstance(tools, dict) else ():
        rules = tool.get("rules") if isinstance(tool, dict) else None
        for i, rule in enumerate(rules if isinstance(rules, list) else ()):
            match = rule.get("match") if isinstance(rule, dict) else None
            for arg, pattern in match.items() if isinstance(match, dict) else ():
                candidates.append((("tools", name, "rules", i, "match", arg), pattern))
    problems: list[PolicyProblem] = []
    for name, table in _result_tables(layer):
        for key in ("ignore", "transient"):
            given = table.get(key)
            for i, pattern in enumerate(given if isinstance(given, list) else ()):
                candidates.append((("tools", name, "result", key, i), pattern))
        fields = table.get("ignore_fields")
        for i, entry in enumerate(fields if isinstance(fields, list) else ()):
            if isinstance(entry, str) and (why := field_path_problem(entry)) is not None:
                problems.append(layer.problem(("tools", name, "result", "ignore_fields", i),
                                              f"{why}, got {_show(entry)}"))
    for path, pattern in candidates:
        if not isinstance(pattern, str):
            continue  # a type error the schema reports
        why = pattern_problem(pattern)
        if why is not None:
            problems.append(layer.problem(path, f"{why}, got {_show(pattern)}"))
    return problems


def _ladder_problems(
    merged: Mapping[str, Any], applied: Mapping[KeyPath, int], layers: list[_Layer]
) -> list[PolicyProblem]:
    """``warn_at ≤ block_at ≤ halt_at`` for each effect's ladder and each tool's override.

    A tool's partial ladder is merged onto the thresholds of every effect its calls can have
    by the policy: its ``effect`` and the effects of its ``rules`` (an effect left to the
    decorator is checked when the Guard is built). Of two values out of order, the one set
    last is reported.
    """
    problems: list[PolicyProblem] = []

    def origin(path: KeyPath) -> str:
        index = applied.get(path, _BUILT_IN)
        return "built-in default" if index == _BUILT_IN else layers[index].origin(path)

    def report(path: KeyPath, message: str) -> None:
        index = applied.get(path, _BUILT_IN)
        if index == _BUILT_IN:  # pragma: no cover - built-in defaults are ordered
            problems.append(PolicyProblem("built-in", _display(path), message))
        else:
            problems.append(layers[index].problem(path, message))

    ladder = merged.get("ladder")
    for effect in _LADDER_EFFECTS:
        table = ladder.get(effect) if isinstance(ladder, dict) else None
        if not isinstance(table, dict):
            continue
        base: KeyPath = ("ladder", effect)
        for low, low_v, high, high_v in _out_of_order(table):
            low_p, high_p = (*base, low), (*base, high)
            blame_low = applied.get(low_p, _BUILT_IN) > applied.get(high_p, _BUILT_IN)
            blamed, other = (low_p, high_p) if blame_low else (high_p, low_p)
            where = "" if origin(other) == origin(blamed) else f", from {origin(other)}"
            if blame_low:
                report(blamed, f"must be ≤ {high} ({high_v}{where})")
            else:
                report(blamed, f"must be ≥ {low} ({low_v}{where})")

    warn, block = (ladder.get("stagnation_warn_at"), ladder.get("stagnation_block_at")
                   ) if isinstance(ladder, dict) else (None, None)
    if type(warn) is int and type(block) is int and 0 < block < warn:
        warn_p, block_p = ("ladder", "stagnation_warn_at"), ("ladder", "stagnation_block_at")
        if applied.get(warn_p, _BUILT_IN) > applied.get(block_p, _BUILT_IN):
            report(warn_p, f"must be ≤ stagnation_block_at ({block}) or 0")
        else:
            report(block_p, f"must be ≥ stagnation_warn_at ({warn}) or 0")

    tools = merged.get("tools")
    for name, tool in tools.items() if isinstance(tools, dict) else ():
        override = tool.get("ladder") if isinstance(tool, dict) else None
        if not isinstance(override, dict):
            continue
        given = {k: v for k, v in override.items() if k in _LADDER_KEYS and type(v) is int}
        base = ("tools", name, "ladder")
        for effect in ["", *_tool_effects(tool)]:  # "": the override's own values alone
            inherited = ladder.get(effect) if effect and isinstance(ladder, dict) else None
            values = {**(inherited if isinstance(inherited, dict) else {}), **given}
            for key, message in override_order_problems(given, values, effect):
                report((*base, key), message)
    return problems


def _approval_problems(
    merged: Mapping[str, Any], applied: Mapping[KeyPath, int], layers: list[_Layer]
) -> list[PolicyProblem]:
    """A tool with ``effect = "readonly"`` and ``requires_approval = true``: an approval
    implies mutating (the call is gated because it acts), so the two contradict each other.
    Blamed on the one of the two keys set last."""
    problems: list[PolicyProblem] = []
    tools = merged.get("tools")
    for name, tool in tools.items() if isinstance(tools, dict) else ():
        if not (isinstance(tool, dict) and tool.get("effect") == "readonly"
                and tool.get("requires_approval") is True):
            continue
        effect_p, approval_p = ("tools", name, "effect"), ("tools", name, "requires_approval")
        if applied.get(effect_p, _BUILT_IN) > applied.get(approval_p, _BUILT_IN):
            problems.append(_blame(effect_p, applied, layers, 'must not be "readonly" with '
                                   'requires_approval = true: an approval implies mutating'))
        else:
            problems.append(_blame(approval_p, applied, layers, 'must not be true with effect '
                                   '= "readonly": an approval implies mutating'))
    return problems


def _lifetime_problems(merged: Mapping[str, Any], applied: Mapping[KeyPath, int],
                       layers: list[_Layer]) -> list[PolicyProblem]:
    """``store.state_ttl_s`` ≥ every idempotency TTL. A task's state that expires before its
    records restarts its change counter, and an until_change record it had lapsed becomes
    valid again: a write that should run is answered from the cache."""
    state_ttl = merged["store"]["state_ttl_s"]
    ttls: list[tuple[KeyPath, float]] = [(("idempotency", "ttl_s"),
                                          merged["idempotency"]["ttl_s"])]
    for name, tool in merged.get("tools", {}).items():
        if isinstance(tool, dict) and tool.get("idempotency_ttl_s") is not None:
            ttls.append((("tools", name, "idempotency_ttl_s"), tool["idempotency_ttl_s"]))
    longest_path, longest = max(ttls, key=lambda item: item[1])
    if state_ttl >= longest:
        return []
    path: KeyPath = ("store", "state_ttl_s")
    index = applied.get(path, applied.get(longest_path, _BUILT_IN))
    message = (f"must be ≥ {_display(longest_path)} ({longest:g} s): a task's state must "
               "outlive its idempotency records")
    if index == _BUILT_IN:  # pragma: no cover - the built-in defaults are consistent
        return [PolicyProblem("built-in", _display(path), message)]
    return [layers[index].problem(path, message)]


def _cluster_problems(merged: Mapping[str, Any], applied: Mapping[KeyPath, int],
                      layers: list[_Layer]) -> list[PolicyProblem]:
    """``store.cluster`` with the rest of ``[store]``: a cluster needs a Redis store and its
    startup nodes as TCP URLs on database 0; several comma-separated URLs need a cluster."""
    store = merged["store"]
    url, cluster = store.get("url"), store.get("cluster", False)
    items = [item.strip() for item in url.split(",")] if isinstance(url, str) else []
    message = ""
    if cluster:
        if store.get("backend") == "memory" and applied.get(("store", "backend")) is not None:
            message = 'needs store.backend = "redis"'
        elif not items:
            message = "needs store.url: the cluster's startup nodes (comma-separated URLs)"
        else:
            for item in items:
                parts = urlsplit(item if "://" in item else f"redis://{item}")
                if parts.scheme == "unix" or not parts.hostname:
                    message = f"needs startup nodes with a host and port, not {_show(item)}"
                elif parts.path.strip("/") not in ("", "0"):
                    message = (f"a Redis Cluster has only database 0, but {_show(item)} "
                               f"names database {parts.path.strip('/')}")
                if message:
                    break
    elif len(items) > 1:
        path: KeyPath = ("store", "url")
        return [_blame(path, applied, layers,
                       "several comma-separated URLs are a cluster's startup nodes: set "
                       "store.cluster = true, or give one URL")]
    if not message:
        return []
    return [_blame(("store", "cluster"), applied, layers, message)]


def _blame(path: KeyPath, applied: Mapping[KeyPath, int], layers: list[_Layer],
           message: str) -> PolicyProblem:
    """A problem at ``path``, in the layer that set it last."""
    index = applied.get(path, _BUILT_IN)
    if index == _BUILT_IN:  # pragma: no cover - the built-in defaults are consistent
        return PolicyProblem("built-in", _display(path), message)
    return layers[index].problem(path, message)


def _tool_effects(tool: Mapping[str, Any]) -> list[str]:
    """The laddered effects a tool's calls can have, as far as the policy says: its
    ``effect`` and its rules' effects. An effect left to the decorator is checked when the
    Guard is built (:func:`toolguard.tools._resolve.resolve_tool`), where it is known."""
    effect = tool.get("effect")
    effects = [] if effect is None else [effect]
    rules = tool.get("rules")
    for rule in rules if isinstance(rules, list) else ():
        if isinstance(rule, dict):
            effects.append(rule.get("effect"))
    # only strings: a list or table where an effect belongs is a type error the schema reports
    return [e for e in dict.fromkeys(e for e in effects if isinstance(e, str))
            if e in _LADDER_EFFECTS]


def _model_message(err: Mapping[str, Any]) -> str:
    """What was expected, for the few values the schema admits and the models refuse: a
    number out of the range of the type that holds it (``max_tool_calls = 1e300``)."""
    kind = str(err.get("type", ""))
    shown = _show(err.get("input"))
    if kind.startswith("int"):
        return f"must be an integer below 2**63, got {shown}"
    if kind.startswith("float"):
        return f"must be a finite number below 1.8e308, got {shown}"
    return str(err.get("msg", "invalid value"))


def _model_problem(
    loc: tuple[int | str, ...], message: str, applied: Mapping[KeyPath, int], layers: list[_Layer]
) -> PolicyProblem:
    path: KeyPath = tuple(loc)
    for n in range(len(path), 0, -1):
        index = applied.get(path[:n])
        if index is not None:
            return layers[index].problem(path, message)
    return PolicyProblem("built-in", _display(path), message)  # pragma: no cover

def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (draft 2020-12), a fresh copy of the package data.

    Returns:
        The schema as a dict (``toolguard schema`` prints it).
    """
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema
