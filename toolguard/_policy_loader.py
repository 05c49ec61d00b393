"""Load a policy: TOML → ``extends`` → JSON Schema → semantic checks → frozen models.

Pipeline (STYLE.md §10):

1. **Parse** each file with :mod:`tomllib`; a syntax error names the file, line and column.
2. **Resolve** ``extends`` (a path relative to the extending file; chains allowed; a cycle is
   reported with the files that form it).
3. **Validate** each file, and the environment overrides, against the shipped JSON Schema
   (``toolguard/policy.schema.json``, draft 2020-12): every error, each with its file, dotted
   key path (``tools.send_email.ladder.block_at``), the line where the key is written and what
   was expected (``must be an integer ≥ 2, got "three"``, ``unknown key 'foo' (allowed: ...)``).
4. **Merge** the layers, lowest first: built-in defaults, the files of the ``extends`` chain
   (most general first), environment variables (:mod:`toolguard._settings`). Every table is an
   overlay: tables merge deeply and the later layer wins; arrays (``rules``, ``redact``) and
   scalars replace. So a file may set any subset of a table, even of ``[ladder.readonly]``.
5. **Check semantics** on the result: ``warn_at ≤ block_at ≤ halt_at`` for ``[ladder.*]`` and
   for each tool's ladder merged onto the thresholds of every effect its calls can have; every
   regular expression (``tools.X.rules[i].match``, ``audit.redact``) compiles.
6. **Build** the frozen :class:`~toolguard.Policy`, with the provenance of every key (which file
   or variable set it) for ``policy.source_of`` and ``toolguard explain``.

All problems are collected and raised as one :class:`~toolguard.PolicyError`.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from jsonschema import Draft202012Validator, ValidationError
from pydantic import ValidationError as ModelValidationError

from ._errors import PolicyError, PolicyProblem
from ._ladder_order import LADDER_KEYS as _LADDER_KEYS
from ._ladder_order import out_of_order as _out_of_order
from ._ladder_order import override_order_problems
from ._normalize import field_path_problem
from ._policy import Policy
from ._regex import pattern_problem
from ._settings import EnvironmentOverrides, read_environment

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

__all__ = [
    "check_policy_files",
    "load_env_option_policy",
    "load_policy",
    "load_policy_dict",
    "policy_from_env",
    "policy_schema",
]

KeyPath = tuple[str | int, ...]

_BUILT_IN = -1  # layer index of a built-in default
_LADDER_EFFECTS = ("readonly", "mutating")


def policy_schema() -> dict[str, Any]:
    """The JSON Schema of a policy file (draft 2020-12), a fresh copy of the package data.

    Returns:
        The schema as a dict (``toolguard schema`` prints it).
    """
    schema: dict[str, Any] = json.loads(_schema_text())
    return schema


def load_policy(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Policy:
    """Load a policy file, its ``extends`` chain and the environment's overrides.

    Precedence (lowest first): built-in defaults < the files (most general first) <
    ``TOOLGUARD_*`` variables; decorator arguments sit between built-ins and the file (applied
    per tool by ``resolve_tool``). See :mod:`toolguard._settings`.

    Args:
        path: the policy file (TOML). ``None``: the file ``TOOLGUARD_POLICY`` or
            ``TOOLGUARD_ENV`` selects, or none (built-in defaults).
        env: the environment variables; ``None`` reads ``os.environ``; ``{}`` ignores the
            environment.

    Returns:
        The frozen policy; ``policy.sources`` lists the files in ``extends`` order, most
        general first, and ``policy.source_of(key_path)`` where each value came from.

    Raises:
        PolicyError: listing every problem in every file and variable.
    """
    return _load(path, env, None)


def load_env_option_policy(name: str, option: str = "--env",
                           env: Mapping[str, str] | None = None) -> Policy:
    """The policy of environment ``name`` given on the command line (``--env NAME``): as if
    ``TOOLGUARD_ENV=name`` were set (and no ``TOOLGUARD_POLICY``), with problems naming
    ``option`` instead of the variable.

    Raises:
        PolicyError: listing every problem.
    """
    from ._settings import PREFIX

    environ = {k: v for k, v in (os.environ if env is None else env).items()
               if k.upper() not in (f"{PREFIX}POLICY", f"{PREFIX}ENV")}
    return _load(None, {**environ, f"{PREFIX}ENV": name}, option)


def _load(path: str | os.PathLike[str] | None, env: Mapping[str, str] | None,
          env_option: str | None) -> Policy:
    try:
        environment = read_environment(env, env_option=env_option)
    except RecursionError:  # a variable holding JSON nested hundreds of levels deep
        raise PolicyError([PolicyProblem(
            "env", "", "a TOOLGUARD_ variable's value is nested too deeply")]) from None
    problems = list(environment.problems)
    if path is None:  # a file given here makes TOOLGUARD_ENV moot, even a malformed one
        problems.extend(environment.selection_problems)
    layers: list[_Layer] = []
    complete = True
    source = os.fspath(path) if path is not None else os.fspath(environment.policy_file or "")
    try:
        if path is not None:
            layers, complete = _read_chain(Path(path), problems)
        elif environment.policy_file is not None:
            layers, complete = _read_chain(
                environment.policy_file, problems, selected_by=environment.selected_by
            )
        return _build(layers, complete, problems, environment)
    except RecursionError:  # a value nested hundreds of levels deep, in a file or a variable
        raise PolicyError([*problems, PolicyProblem(
            source or "env", "", "a value is nested too deeply (hundreds of levels)")]) from None


def policy_from_env(env: Mapping[str, str] | None = None) -> Policy:
    """The policy the environment selects, with the environment's overrides applied.

    ``TOOLGUARD_POLICY`` or ``TOOLGUARD_ENV`` choose the file; with neither, the built-in
    defaults are used (no file is searched for). See the module docstring.

    Args:
        env: the variables; ``None`` reads ``os.environ``.

    Returns:
        The frozen :class:`toolguard.Policy`, with provenance for ``explain``.

    Raises:
        PolicyError: the file or a variable is invalid; lists every problem.
    """
    return load_policy(None, env=env)


def load_policy_dict(data: Mapping[str, Any], *, source: str = "<dict>") -> Policy:
    """Validate a policy given as a mapping (the TOML document as Python values).

    The environment is not read. An ``extends`` key is resolved relative to the working
    directory.

    Args:
        data: the document, e.g. ``{"budget": {"max_tool_calls": 20}}``.
        source: how problems and ``policy.source_of`` name it.

    Returns:
        The frozen policy (``sources`` lists only the files it extends).

    Raises:
        PolicyError: listing every problem.
    """
    layer = _Layer(_as_document(data), source)
    problems: list[PolicyProblem] = []
    layers, complete = [layer], True
    extends = data.get("extends")
    if isinstance(extends, str):
        parents, complete = _read_chain(Path(extends), problems, extending=layer)
        layers = [*parents, layer]
    return _build(layers, complete, problems, None)


def _as_document(value: Any) -> Any:
    """Python values as a TOML document holds them: tuples as arrays, mappings as tables
    (``Policy.model_dump()`` and hand-written dicts use both)."""
    if isinstance(value, Mapping):
        return {k: _as_document(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_document(v) for v in value]
    return value


def check_policy_files(paths: Iterable[str | os.PathLike[str]]) -> list[PolicyProblem]:
    """Check policy files as ``toolguard check`` does (the environment is ignored).

    Args:
        paths: the files.

    Returns:
        Every problem of every file (with its ``extends`` chain), empty if all are valid.
    """
    problems: list[PolicyProblem] = []
    for path in paths:
        try:
            load_policy(path, env={})
        except PolicyError as error:
            problems.extend(error.problems)
    return problems


# --- layers --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Layer:
    """One overlay: a file of the ``extends`` chain, a mapping, or the environment.

    ``variables`` (the environment only) maps a lower-case key path to the variable that set
    it; problems and provenance then name that variable instead of ``source``.
    """

    data: dict[str, Any]
    source: str
    lines: _KeyLines | None = None
    variables: Mapping[tuple[str, ...], str] = field(default_factory=dict)

    def origin(self, path: KeyPath) -> str:
        """Who set the value at ``path``: the file, or ``env VAR`` for the environment."""
        if not self.variables:
            return self.source
        lowered = tuple(p.lower() for p in path if isinstance(p, str))
        for n in range(len(lowered), 0, -1):
            var = self.variables.get(lowered[:n])
            if var is not None:
                return f"env {var}"
        # set by variables deeper than the problem (TOOLGUARD_TOOLS__BASH__RULES__0__EFFECT
        # when tools.bash.rules must be an array): name them
        deeper = sorted(var for key, var in self.variables.items()
                        if key[:len(lowered)] == lowered)
        return f"env {', '.join(deeper)}" if deeper else self.source

    def position(self, path: KeyPath) -> tuple[int, int] | tuple[None, None]:
        """Line and column where ``path`` (or its nearest written parent) is set, if known."""
        found = None if self.lines is None else self.lines.position_of(path)
        return (None, None) if found is None else found

    def problem(self, path: KeyPath, message: str) -> PolicyProblem:
        """A problem located at ``path`` in this layer."""
        line, column = self.position(path)
        return PolicyProblem(self.origin(path), _display(path), message, line, column)


def _read_chain(
    path: Path,
    problems: list[PolicyProblem],
    *,
    extending: _Layer | None = None,
    selected_by: str | None = None,
) -> tuple[list[_Layer], bool]:
    """Read ``path`` and the files it extends.

    Args:
        path: the most specific file.
        problems: where read, syntax and ``extends`` problems are appended.
        extending: the layer whose ``extends`` names ``path`` (for a mapping).
        selected_by: the variable that chose ``path``, for a "not found" message.

    Returns:
        The layers read, most general first, and whether the whole chain was read.
    """
    chain: list[_Layer] = []
    seen: list[tuple[Path, str]] = []
    display = os.fspath(path)
    while True:
        if "\0" in display:  # a path given in code (a file's extends is refused below)
            nul = "must be a file path, got a path holding a NUL byte"
            problems.append(extending.problem(("extends",), nul) if extending is not None
                            else PolicyProblem(display.replace("\0", "\\0"), "", nul))
            return chain[::-1], False
        resolved = Path(display).resolve()
        start = next((i for i, (real, _) in enumerate(seen) if real == resolved), None)
        if start is not None and extending is not None:
            cycle = " → ".join([shown for _, shown in seen[start:]] + [display])
            problems.append(extending.problem(("extends",), f"cycle: {cycle}"))
            return chain[::-1], False
        seen.append((resolved, display))
        try:
            if Path(display).exists() and not Path(display).is_file():
                # a directory, a FIFO or a device: reading would fail or block forever
                raise IsADirectoryError(0, "not a regular file")
            text = _decoded(Path(display).read_bytes())
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) else _where(error)
            if extending is not None:
                message = f"cannot read {display}: {reason or error}"
                problems.append(extending.problem(("extends",), message))
            else:
                chosen = f" (selected by {selected_by})" if selected_by else ""
                message = f"cannot read policy file{chosen}: {reason or error}"
                problems.append(PolicyProblem(display, "", message))
            return chain[::-1], False
        try:
            data: dict[str, Any] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            problems.append(_syntax_problem(display, text, error))
            return chain[::-1], False
        except (ValueError, RecursionError) as error:  # e.g. an integer of 5,000 digits
            why = (str(error).split(";")[0] if isinstance(error, ValueError)
                   else "nested too deeply")
            problems.append(PolicyProblem(display, "", f"cannot be read as TOML: {why}"))
            return chain[::-1], False
        layer = _Layer(data, display, _KeyLines(text))
        chain.append(layer)
        extends = data.get("extends")
        if not isinstance(extends, str):  # absent, or a type error the schema reports
            return chain[::-1], True
        extending = layer
        if not extends.strip():  # "" would name this file's own directory
            problems.append(layer.problem(
                ("extends",), "must be a file path (relative to this file), got \"\""
                if not extends else f"must be a file path, got {_show(extends)}"))
            return chain[::-1], False
        if "\0" in extends:  # no file has such a name: os calls raise ValueError on it
            problems.append(layer.problem(
                ("extends",), "must be a file path, got a path holding a NUL byte"))
            return chain[::-1], False
        target = Path(display).parent / extends
        # Shown tidied ("a/../b.toml" as "b.toml") only where that is the same file: through
        # a symbolic link, ".." goes up from the link's target, as the system reads it.
        tidy = os.path.normpath(target)
        display = tidy if Path(tidy).resolve() == target.resolve() else os.fspath(target)


def _decoded(data: bytes) -> str:
    """A policy file's text: UTF-8, without the byte order mark some Windows editors write."""
    text = data.decode("utf-8")
    return text[1:] if text.startswith("\ufeff") else text


def _where(error: UnicodeDecodeError) -> str:
    """A decoding error with the line and column of the offending byte."""
    if error.object.startswith((b"\xff\xfe", b"\xfe\xff")):  # UTF-32 LE starts FF FE too
        return "UTF-16 or UTF-32 text (a byte order mark): save it as UTF-8"
    before = error.object[: error.start]
    line = before.count(b"\n") + 1
    column = error.start - (before.rfind(b"\n") + 1) + 1
    return f"not UTF-8 text: byte 0x{error.object[error.start]:02x} at line {line}, column {column}"


_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


_TOML_AT_END = " (at end of document)"


def _syntax_problem(source: str, text: str, error: Exception) -> PolicyProblem:
    """A TOML syntax error with its line and column (parsed from the message: ``tomllib``
    before 3.14 and ``tomli`` have no position attributes)."""
    message = str(error)
    found = _TOML_POSITION.search(message)
    if found:
        message = message[: found.start()]
        line, column = int(found.group(1)), int(found.group(2))
    else:  # at the end of the document
        message = message.removesuffix(_TOML_AT_END)
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
    return PolicyProblem(source, "", f"TOML syntax error: {message}", line, column)


# --- the pipeline --------------------------------------------------------------------------


def _build(
    layers: list[_Layer],
    complete: bool,
    problems: list[PolicyProblem],
    environment: EnvironmentOverrides | None,
) -> Policy:
    """Validate, merge and check ``layers`` (plus the environment), then build the policy."""
    merged: dict[str, Any] = Policy().model_dump(mode="json", exclude={"sources"})
    applied: dict[KeyPath, int] = {}  # leaf path -> index of the layer that set it, in order
    sources = tuple(layer.source for layer in layers if layer.lines is not None)  # the files
    if environment is not None and environment.data:
        env_data = _rekey(environment.data, _merge_all(merged, layers))
        layers = [*layers, _Layer(env_data, "env", None, environment.variables)]

    for index, layer in enumerate(layers):
        found = _schema_problems(layer)
        shown = {p.path for p in found}  # a value the schema refused: that problem is enough
        found += [p for p in _regex_problems(layer) + _value_problems(layer)
                  if p.path not in shown]
        problems.extend(sorted(found, key=lambda p: (p.line or 0, p.column or 0)))
        merged = _merge(merged, layer.data)
        for leaf in _leaves(layer.data):
            applied.pop(leaf, None)  # re-insert: dict order is the order values were applied
            applied[leaf] = index
    merged.pop("extends", None)
    if complete:
        problems.extend(_ladder_problems(merged, applied, layers))
        problems.extend(_approval_problems(merged, applied, layers))
        if not problems:
            problems.extend(_lifetime_problems(merged, applied, layers))
            problems.extend(_cluster_problems(merged, applied, layers))
    if problems:
        raise PolicyError(_unique(problems))

    provenance = {_provenance_key(p): layers[i].origin(p) for p, i in applied.items()}
    try:
        policy = Policy.model_validate({**merged, "sources": sources})
    except ModelValidationError as error:  # the schema let through what the models refuse
        raise PolicyError(
            [_model_problem(err["loc"], _model_message(err), applied, layers)
             for err in error.errors()]
        ) from error
    return policy.with_provenance(provenance)


def _merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """``overlay`` onto ``base``: tables merge deeply, anything else is replaced."""
    out = dict(base)
    for key, value in overlay.items():
        below = out.get(key)
        if isinstance(value, dict) and isinstance(below, dict):
            out[key] = _merge(below, value)
        else:
            out[key] = value
    return out


def _merge_all(base: dict[str, Any], layers: Iterable[_Layer]) -> dict[str, Any]:
    for layer in layers:
        base = _merge(base, layer.data)
    return base


def _rekey(overlay: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, Any]:
    """Spell each key of ``overlay`` as the one key of ``base`` it equals case-insensitively.

    Environment variable names are upper-case by convention; tool and argument names in a
    policy are case-sensitive (``TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS`` → ``tools.sendEmail``).
    """
    out: dict[str, Any] = {}
    for key, value in overlay.items():
        spelled = key
        if key not in base:
            same = [name for name in base if name.lower() == key.lower()]
            if len(same) == 1:
                spelled = same[0]
        below = base.get(spelled)
        if isinstance(value, dict) and isinstance(below, dict):
            out[spelled] = _rekey(value, below)
        else:
            out[spelled] = value
    return out


def _leaves(data: Mapping[str, Any], prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """Paths of the values ``data`` sets: scalars, arrays (replaced whole) and empty tables."""
    for key, value in data.items():
        path = (*prefix, key)
        if key == "extends" and not prefix:
            continue
        if isinstance(value, dict) and value:
            yield from _leaves(value, path)
        else:
            yield path


def _unique(problems: Iterable[PolicyProblem]) -> list[PolicyProblem]:
    return list(dict.fromkeys(problems))


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
    is not a Redis URL."""
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
    if isinstance(url, str) and not url.startswith(_REDIS_SCHEMES):
        problems.append(layer.problem(
            ("store", "url"), f"must be a Redis URL ({', '.join(_REDIS_SCHEMES)}...), "
                              f"got {_show(url)}"))
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
        ignore = table.get("ignore")
        for i, pattern in enumerate(ignore if isinstance(ignore, list) else ()):
            candidates.append((("tools", name, "result", "ignore", i), pattern))
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
    Guard is built (:func:`toolguard._resolve.resolve_tool`), where it is known."""
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


# --- key paths -----------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _display(path: KeyPath) -> str:
    """``tools."fs.grep".rules[0].match.command``: TOML spelling, indices in brackets."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            key = part if _BARE_KEY.fullmatch(part) else json.dumps(part, ensure_ascii=False)
            out += f".{key}" if out else key
    return out


def _provenance_key(path: KeyPath) -> str:
    """The key of ``policy.source_of``: plain dotted names as ``resolve_tool`` builds them."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


class _KeyLines:
    """The position of every key, table header and array item in a valid TOML text.

    :mod:`tomllib` keeps no positions, so this small scanner walks the text once, tracking the
    current table (``[a.b]``, ``[[a.b]]`` with its index), dotted keys, inline tables and
    arrays, and skipping strings and comments. Best effort: it stops quietly on anything it
    does not understand, and :meth:`position_of` falls back to the nearest written parent.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._pos = 0
        self._line = 1
        self._positions: dict[KeyPath, tuple[int, int]] = {}  # 1-based line and column
        self._tables: dict[KeyPath, int] = {}  # array-of-tables path -> items so far
        with contextlib.suppress(IndexError, ValueError, tomllib.TOMLDecodeError, KeyError):
            self._document()  # on anything unexpected, keep what was found

    def position_of(self, path: KeyPath) -> tuple[int, int] | None:
        """Line and column of ``path``, else of its nearest parent written in the text."""
        for n in range(len(path), 0, -1):
            found = self._positions.get(path[:n])
            if found is not None:
                return found
        return None

    def _here(self) -> tuple[int, int]:
        return self._line, self._pos - (self._text.rfind("\n", 0, self._pos) + 1) + 1

    def _record(self, path: KeyPath, where: tuple[int, int]) -> None:
        for n in range(1, len(path) + 1):
            self._positions.setdefault(path[:n], where)

    def _peek(self, ahead: int = 0) -> str:
        index = self._pos + ahead
        return self._text[index] if index < len(self._text) else ""

    def _advance(self, count: int = 1) -> None:
        self._line += self._text.count("\n", self._pos, self._pos + count)
        self._pos += count

    def _skip(self, *, newlines: bool) -> None:
        """Skip blanks (and line breaks and comments when ``newlines``)."""
        while self._pos < len(self._text):
            char = self._peek()
            if char in " \t" or (newlines and char in "\r\n"):
                self._advance()
            elif char == "#":
                end = self._text.find("\n", self._pos)
                self._advance((len(self._text) if end < 0 else end) - self._pos)
            else:
                return

    def _expect(self, char: str) -> None:
        if self._peek() != char:
            raise ValueError(f"expected {char!r} at line {self._line}")
        self._advance()

    def _document(self) -> None:
        table: KeyPath = ()
        while True:
            self._skip(newlines=True)
            if self._pos >= len(self._text):
                return
            where = self._here()
            if self._text.startswith("[[", self._pos):
                self._advance(2)
                name: KeyPath = tuple(self._key())
                self._expect("]")
                self._expect("]")
                index = self._tables.get(name, 0)
                self._tables[name] = index + 1
                table = (*name, index)
                self._record(table, where)
            elif self._peek() == "[":
                self._advance()
                table = tuple(self._key())
                self._expect("]")
                self._record(table, where)
            else:
                path = (*table, *self._key())
                self._expect("=")
                self._record(path, where)
                self._value(path)

    def _key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self._skip(newlines=False)
            if self._peek() in {'"', "'"}:
                raw = self._string()
                parts.append(tomllib.loads(f"k = {raw}")["k"])
            else:
                found = _BARE_KEY.match(self._text, self._pos)
                if found is None:
                    raise ValueError(f"expected a key at line {self._line}")
                parts.append(found.group())
                self._advance(len(found.group()))
            self._skip(newlines=False)
            if self._peek() != ".":
                return parts
            self._advance()

    def _value(self, path: KeyPath) -> None:
        self._skip(newlines=False)
        char = self._peek()
        if char == "{":
            self._advance()
            while True:
                self._skip(newlines=True)
                if self._peek() == "}":
                    self._advance()
                    return
                where = self._here()
                inner = (*path, *self._key())
                self._expect("=")
                self._record(inner, where)
                self._value(inner)
                self._skip(newlines=True)
                if self._peek() == ",":
                    self._advance()
        elif char == "[":
            self._advance()
            index = 0
            while True:
                self._skip(newlines=True)
                if self._peek() == "]":
                    self._advance()
                    return
                self._record((*path, index), self._here())
                self._value((*path, index))
                self._skip(newlines=True)
                if self._peek() == ",":
                    self._advance()
                index += 1
        elif char in {'"', "'"}:
            self._string()
        else:
            found = _SCALAR.match(self._text, self._pos)
            if found is None or not found.group():
                raise ValueError(f"expected a value at line {self._line}")
            self._advance(len(found.group()))

    def _string(self) -> str:
        """Skip a string of any of the four kinds; return its raw text (quotes included)."""
        start = self._pos
        quote = self._peek()
        if self._text.startswith(quote * 3, self._pos):
            end = self._text.index(quote * 3, self._pos + 3)
            if quote == '"':
                while _escaped(self._text, end):
                    end = self._text.index(quote * 3, end + 1)
            end += 3
            for _ in range(2):  # up to two quotes may end the content: """a"""" is 'a"'
                if end < len(self._text) and self._text[end] == quote:
                    end += 1
        else:
            end = self._pos + 1
            while self._text[end] != quote:
                end += 2 if quote == '"' and self._text[end] == "\\" else 1
            end += 1
        self._advance(end - start)
        return self._text[start:end]


_SCALAR = re.compile(r"[^,\]}\r\n#]+")


def _escaped(text: str, index: int) -> bool:
    """Whether ``text[index]`` is preceded by an odd number of backslashes."""
    count = 0
    while index - count - 1 >= 0 and text[index - count - 1] == "\\":
        count += 1
    return count % 2 == 1
