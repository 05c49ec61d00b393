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
   (most general first), environment variables (:mod:`toolguard.policy._settings`). Every
   table is an overlay: tables merge deeply and the later layer wins; arrays (``rules``,
   ``redact``) and scalars replace. So a file may set any subset of a table, even of
   ``[ladder.readonly]``.
5. **Check semantics** on the result: ``warn_at ≤ block_at ≤ halt_at`` for ``[ladder.*]`` and
   for each tool's ladder merged onto the thresholds of every effect its calls can have; every
   regular expression (``tools.X.rules[i].match``, ``audit.redact``) compiles.
6. **Build** the frozen :class:`~toolguard.Policy`, with the provenance of every key (which file
   or variable set it) for ``policy.source_of`` and ``toolguard explain``.

All problems are collected and raised as one :class:`~toolguard.PolicyError`. This module
reads and merges; the checks of stages 3 and 5 are in :mod:`toolguard.policy._checks`, and
where each key is written (the layers, lines and columns) in :mod:`toolguard.policy._layers`.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError as ModelValidationError

from toolguard._errors import PolicyError, PolicyProblem

from ._checks import (
    _approval_problems,
    _cluster_problems,
    _ladder_problems,
    _lifetime_problems,
    _model_message,
    _model_problem,
    _regex_problems,
    _schema_problems,
    _show,
    _value_problems,
    policy_schema,
)
from ._layers import KeyPath, _KeyLines, _Layer, _leaves, _provenance_key
from ._model import Policy
from ._settings import EnvironmentOverrides, read_environment
from ._shipped import is_policy_name, shipped_policies, shipped_policy

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


def load_policy(
    path: str | os.PathLike[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
) -> Policy:
    """Load a policy file, its ``extends`` chain and the environment's overrides.

    Precedence (lowest first): built-in defaults < the files (most general first) <
    ``TOOLGUARD_*`` variables; decorator arguments sit between built-ins and the file (applied
    per tool by ``resolve_tool``). See :mod:`toolguard.policy._settings`.

    Args:
        path: the policy file (TOML), or the name of a policy the package ships
            (``"default"``, ``"prod"``, ``"coding-agent"``: a name has no path separator
            and no ``.toml`` suffix; ``toolguard policies`` lists them). ``None``: the file
            ``TOOLGUARD_POLICY`` or ``TOOLGUARD_ENV`` selects, or none (built-in defaults).
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
            layers, complete = _read_chain(os.fspath(path), problems)  # "./x" as given
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
        parents, complete = _read_chain(extends, problems, extending=layer)
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


def check_policy_files(paths: Iterable[str | os.PathLike[str]],
                       env: Mapping[str, str] | None = None) -> list[PolicyProblem]:
    """Check policy files as ``toolguard check`` does: each file with its ``extends``
    chain, then, for a file that is valid, the same file under the environment's
    ``TOOLGUARD_*`` overrides, as the guard would load it (their problems name the variable:
    ``source`` ``"env TOOLGUARD_..."``).

    Args:
        paths: the files.
        env: the environment variables; ``None`` reads ``os.environ``; ``{}`` checks the
            files alone.

    Returns:
        Every problem of every file (with its ``extends`` chain), empty if all are valid.
    """
    problems: list[PolicyProblem] = []
    for path in paths:
        try:
            load_policy(path, env={})
            if env != {}:
                load_policy(path, env=env)
        except PolicyError as error:
            problems.extend(error.problems)
    return problems


def _read_chain(
    path: str | Path,
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
        if is_policy_name(display):  # a shipped policy, by name
            found = shipped_policy(display)
            if found is None:
                message = (f"no policy named {_show(display)} ships with toolguard (shipped: "
                           f"{', '.join(shipped_policies())}); a path to a file of yours needs "
                           "a directory (./NAME) or the .toml suffix")
                problems.append(extending.problem(("extends",), message) if extending is not None
                                else PolicyProblem(display, "", message))
                return chain[::-1], False
            display = os.fspath(found)
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
        if is_policy_name(extends):  # resolved at the top of the loop
            display = extends
            continue
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
        refused = {(p.source, p.path) for p in problems}  # one problem a key is enough
        problems.extend(p for p in _ladder_problems(merged, applied, layers)
                        + _approval_problems(merged, applied, layers)
                        if (p.source, p.path) not in refused)
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


def _unique(problems: Iterable[PolicyProblem]) -> list[PolicyProblem]:
    return list(dict.fromkeys(problems))


