"""Environment variables: which policy file to load, and overrides of any policy key.

Precedence, lowest first (after pydantic-settings' ``test_precedence_and_merging.py``; tested
in ``tests/policy/test_precedence.py``)::

    built-in defaults  <  decorator arguments  <  policy file  <  environment variables
                                                  ([tools.X] beats
                                                   the global sections)

Variables (``TOOLGUARD_`` prefix, names case-insensitive, ``__`` between nested keys):

- ``TOOLGUARD_POLICY=path/to/file.toml`` names the policy file (relative to the working
  directory); it wins over ``TOOLGUARD_ENV``.
- ``TOOLGUARD_ENV=prod`` selects ``<TOOLGUARD_POLICY_DIR>/prod.toml``; the directory defaults
  to ``./policies``.
- With neither set, **no file is read**, not even ``./policies/default.toml``: the policy is the
  built-in defaults (:class:`toolguard.Policy`) plus the overrides below. A policy file is
  always chosen explicitly.
- ``TOOLGUARD_<KEY>`` overrides a key by its path: ``TOOLGUARD_MODE=observe``,
  ``TOOLGUARD_BUDGET__MAX_TOOL_CALLS=20``, ``TOOLGUARD_STORE__URL=redis://cache:6379/0``,
  ``TOOLGUARD_TOOLS__SEND_EMAIL__MAX_CALLS=2``. Tool and argument names are case-sensitive in
  a policy while variable names are upper-case by convention, so such a name matches a name
  already in the policy file case-insensitively, else it is taken in lower case.
- A value is parsed as JSON when it is valid JSON (``20`` → int, ``true`` → bool, ``null`` →
  unset, i.e. no limit, ``["a", "b"]`` → array, ``{"warn_at": 2}`` → table merged like a
  file's), else taken as a string (``observe``). To pass a string that looks like JSON, quote
  it: ``TOOLGUARD_STORE__KEY_PREFIX='"123"'``.

Override values are validated exactly like file values (the same JSON Schema and semantic
checks); a bad one is a :class:`~toolguard.PolicyProblem` whose ``source`` is
``env TOOLGUARD_...``, the variable to fix. ``policy.source_of(path)`` reports the same for
every key a variable set. Other ``TOOLGUARD_*`` variables (e.g. ones a test suite uses) are
ignored.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)
from pydantic_settings.sources.utils import parse_env_vars

from toolguard._errors import PolicyProblem

__all__ = ["EnvironmentOverrides", "ToolguardSettings", "read_environment"]

PREFIX = "TOOLGUARD_"
NESTED_DELIMITER = "__"
_ENV_NAME = re.compile(r"[A-Za-z0-9_.-]+")


class ToolguardSettings(BaseSettings):
    """The ``TOOLGUARD_*`` variables, as pydantic-settings reads them.

    Build it with :func:`read_environment`, which reads an explicit mapping; instantiated
    directly it reads nothing (only keyword arguments). Override values stay raw strings here
    (pydantic-settings only splits the names); :func:`read_environment` parses each one once.

    Attributes:
        env: ``TOOLGUARD_ENV``: the name of a file in ``policy_dir`` without ``.toml``.
        policy: ``TOOLGUARD_POLICY``: a policy file path.
        policy_dir: ``TOOLGUARD_POLICY_DIR``: where ``env`` files live (default ``policies``).
        mode, default_effect, strict_tools, require_task, default_max_polls, max_args_bytes:
            top-level
            policy keys.
        budget, ladder, idempotency, approval, audit, store, tools: policy tables, nested by
            ``__`` (or a whole table as one JSON object).
    """

    model_config = SettingsConfigDict(
        env_prefix=PREFIX,
        env_nested_delimiter=NESTED_DELIMITER,
        case_sensitive=False,
        extra="ignore",
    )

    env: str | None = None
    policy: Path | None = None
    policy_dir: Path = Path("policies")

    mode: str | None = None
    default_effect: str | None = None
    strict_tools: str | None = None
    require_task: str | None = None
    default_max_polls: str | None = None
    max_args_bytes: str | None = None
    budget: dict[str, Any] | str | None = None
    ladder: dict[str, Any] | str | None = None
    idempotency: dict[str, Any] | str | None = None
    approval: dict[str, Any] | str | None = None
    audit: dict[str, Any] | str | None = None
    store: dict[str, Any] | str | None = None
    tools: dict[str, Any] | str | None = None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Only keyword arguments: :func:`read_environment` reads the environment mapping."""
        return (init_settings,)


# Settings fields that are policy keys (the others choose the file).
OVERRIDE_KEYS: tuple[str, ...] = tuple(
    name for name in ToolguardSettings.model_fields if name not in {"env", "policy", "policy_dir"}
)


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping, leaving values undecoded."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )

    def decode_complex_value(self, field_name: str, field: FieldInfo | None, value: Any) -> Any:
        # Values are parsed once, uniformly, by read_environment (pydantic-settings would
        # decode JSON at some nesting depths and not at others).
        return value


@dataclass(frozen=True)
class EnvironmentOverrides:
    """What the environment says about the policy.

    Attributes:
        policy_file: the file to load (``TOOLGUARD_POLICY``, else ``TOOLGUARD_ENV`` in
            ``TOOLGUARD_POLICY_DIR``), or ``None`` for built-in defaults.
        selected_by: how ``policy_file`` was chosen, e.g. ``"TOOLGUARD_ENV=prod"``.
        data: the override keys as a nested policy document (names in lower case, values
            parsed).
        variables: lower-case key path → the variable that set it, for every variable in
            ``data``.
        problems: variables that could not be used (a bad ``TOOLGUARD_ENV``, a variable that a
            whole-table variable shadows).
    """

    policy_file: Path | None = None
    selected_by: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    variables: dict[tuple[str, ...], str] = field(default_factory=dict)
    problems: tuple[PolicyProblem, ...] = ()
    selection_problems: tuple[PolicyProblem, ...] = ()  # of TOOLGUARD_ENV: moot given a file


def read_environment(env: Mapping[str, str] | None = None, *,
                     env_option: str | None = None) -> EnvironmentOverrides:
    """Read the ``TOOLGUARD_*`` variables (see the module docstring).

    Args:
        env: the variables; ``None`` reads ``os.environ``.
        env_option: the command-line option that gave ``TOOLGUARD_ENV``'s value (``--env``):
            ``selected_by`` and a problem with the name then name the option, which the
            user typed, not the variable.

    Returns:
        The selected policy file, the overrides and any problems with the variables. Override
        values are not validated here: the loader validates them like a policy file's.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    names = _variable_names(environ)
    settings = ToolguardSettings(**_MappingEnvSource(ToolguardSettings, environ)())
    problems: list[PolicyProblem] = [
        PolicyProblem(source=f"env {', '.join(spellings)}", path=".".join(parts),
                      message="set by several variables that differ only in case; keep one")
        for parts, spellings in _case_conflicts(environ).items()]
    selection: list[PolicyProblem] = []

    policy_file: Path | None = None
    selected_by: str | None = None
    # An empty TOOLGUARD_POLICY, or TOOLGUARD_POLICY_DIR where TOOLGUARD_ENV needs it, would
    # be Path("") = "." (the current directory): say so instead, and select nothing.
    used = ["policy"] if settings.policy is not None or settings.env is None else [
        "policy", "policy_dir"]
    for key in used:
        var = names.get((key,))
        if var is not None and not environ[var].strip():
            what = "a policy file path" if key == "policy" else "a directory"
            selection.append(PolicyProblem(
                source=f"env {var}", path="",
                message=f"must be {what}, got an empty value (unset the variable instead)"))
    if selection:
        pass
    elif settings.policy is not None:
        policy_file = settings.policy
        selected_by = f"{names.get(('policy',), PREFIX + 'POLICY')}={settings.policy}"
    elif settings.env is not None:
        var = env_option or names.get(("env",), PREFIX + "ENV")
        if _ENV_NAME.fullmatch(settings.env):
            policy_file = settings.policy_dir / f"{settings.env}.toml"
            selected_by = f"{var} {settings.env}" if env_option else f"{var}={settings.env}"
        else:
            selection.append(
                PolicyProblem(
                    source=var if env_option else f"env {var}",
                    path="",
                    message=(
                        "must be the name of a file in TOOLGUARD_POLICY_DIR without .toml "
                        f"(letters, digits, _ . -), got {settings.env!r}"
                    ),
                )
            )

    given = {key: getattr(settings, key) for key in OVERRIDE_KEYS}
    raw = {key: value for key, value in given.items() if value is not None}
    variables: dict[tuple[str, ...], str] = {}
    for parts, var in names.items():
        if parts[0] not in OVERRIDE_KEYS:
            continue
        shadow = _shadowing_prefix(raw, parts)
        if shadow is None:
            variables[parts] = var
        else:
            problems.append(
                PolicyProblem(
                    source=f"env {var}",
                    path=".".join(parts),
                    message=f"ignored: {names[shadow]} sets the whole of {'.'.join(shadow)}; "
                    "set either that variable or its keys, not both",
                )
            )
    return EnvironmentOverrides(
        policy_file=policy_file,
        selected_by=selected_by,
        data=_parsed(raw),
        variables=variables,
        problems=tuple(problems),
        selection_problems=tuple(selection),
    )


def parse_value(text: str) -> Any:
    """An environment value: JSON when it parses (``NaN``/``Infinity`` do not), else the text."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError:
        return text


def _reject_constant(name: str) -> Any:
    raise ValueError(name)


def _parsed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _parsed(item) for key, item in value.items()}
    if isinstance(value, str):
        return parse_value(value)
    return value


def _variable_names(environ: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Lower-case key path → the variable's name as spelled, for every ``TOOLGUARD_*``."""
    return {parts: spelled[-1] for parts, spelled in _spellings(environ).items()}


def _spellings(environ: Mapping[str, str]) -> dict[tuple[str, ...], list[str]]:
    """Lower-case key path → every ``TOOLGUARD_*`` variable naming it, in environment order."""
    spellings: dict[tuple[str, ...], list[str]] = {}
    for name in environ:
        if name.upper().startswith(PREFIX) and len(name) > len(PREFIX):
            parts = tuple(name[len(PREFIX):].lower().split(NESTED_DELIMITER))
            spellings.setdefault(parts, []).append(name)
    return spellings


def _case_conflicts(environ: Mapping[str, str]) -> dict[tuple[str, ...], list[str]]:
    """Key paths set by two or more ``TOOLGUARD_*`` variables spelled in different cases
    (``TOOLGUARD_MODE`` and ``toolguard_mode``): which one wins would depend on their order."""
    return {parts: sorted(names) for parts, names in _spellings(environ).items()
            if len(names) > 1}


def _shadowing_prefix(raw: Mapping[str, Any], parts: tuple[str, ...]) -> tuple[str, ...] | None:
    """The shorter path whose (string) value hides ``parts`` from pydantic-settings, if any.

    ``TOOLGUARD_BUDGET='{...}'`` and ``TOOLGUARD_BUDGET__MAX_TOKENS=5`` cannot both apply:
    pydantic-settings keeps the whole-table value.
    """
    node: Any = raw
    for depth, part in enumerate(parts):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, str):
            return parts[:depth]
        else:
            return None
    return None
