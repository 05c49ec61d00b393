"""Stage 1, prepare: parse the model's arguments, bind defaults, classify the call (rules,
shell commands), hash it canonically and validate it against the tool's schema. No state is
read or written: the result is a :class:`~toolguard.engine._call._Prepared` call."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from toolguard._errors import CanonicalizationError
from toolguard._results import ToolResult
from toolguard._types import (
    MUTATING,
    READONLY,
    SCOPE_OFF,
    SCOPE_TASK,
)
from toolguard.hashing._canonical import digest, dump_for_hash, hash_args
from toolguard.hashing._json_text import ArgumentsError, parse_arguments
from toolguard.hashing._redact import SHOWN_DEPTH
from toolguard.shell._classifier import classify_argv
from toolguard.tools._decorators import ToolSpec, recorded_tool
from toolguard.tools._schema_words import describe

from ._approval import exact_hash
from ._audit import scrub
from ._call import _Config, _Entry, _Prepared
from ._content import safe_repr as _safe_repr
from ._limits import MAX_ARGS_DEPTH, oversized, short_name, too_deep, too_large

if TYPE_CHECKING:
    from ._call import TaskState


def _no_such_tool(**_: Any) -> None:  # pragma: no cover - an unknown tool is never run
    raise RuntimeError("an unknown tool was executed")


def prepare(task: TaskState, cfg: _Config, tool: str, raw: Any,
             virtual: bool, call_id: str = "") -> _Prepared | ToolResult:
    # a name that is not a string (None from a message missing it) is an unknown tool
    entry = cfg.entries.get(tool) if type(tool) is str else None
    # call_id: a call begun elsewhere keeps its own (toolguard.engine._pending.attach)
    call_id = call_id or f"{task.task_id}#{next(task._ids)}{task._id_suffix}"
    if entry is None:
        tool = short_name(tool)  # the model's: kept in counters, results and history
        entry = unknown_entry(task, cfg, tool) if not virtual else cfg.virtual.get(tool)
        if entry is None:
            entry = task.guard._entry(cfg.policy, recorded_tool(tool))
            if len(cfg.virtual) < 1000:  # names come from the model: bounded
                cfg.virtual[tool] = entry
    invalid: str | None = None
    args: dict[str, Any]
    dumped = b""  # the hash's serialization of raw, made already by the bounds
    shown = False  # and bounded as redaction reads it (toolguard.hashing._redact.shown_args)
    deep: str | None = None
    if type(raw) is dict:  # the common case first: isinstance(raw, Mapping) costs 0.2 µs
        # the hash's first serialization, kept for it, also bounds the size and the depth;
        # bounded first to the depth redaction shows, so that audit events reuse it too
        dumped = dump_for_hash(raw, SHOWN_DEPTH)
        shown = bool(dumped)
        if not shown:  # deeper than redaction shows, or not JSON-native: one more try
            dumped = dump_for_hash(raw, MAX_ARGS_DEPTH)
        limit = cfg.max_args_bytes
        if dumped:
            too = None if limit is None or len(dumped) <= limit else too_large(len(dumped),
                                                                                limit)
        else:  # a value orjson does not take, or nested too deep: measured, walked
            too = oversized(raw, limit)
            deep = too_deep(None, raw) if too is None else None
        args = raw.copy()
    else:
        too = oversized(raw, cfg.max_args_bytes)
    if too is not None:
        # not parsed, and not kept: history holds a note instead of the arguments
        args, invalid = {}, too
        raw = "<arguments larger than max_args_bytes: not kept>"
    elif type(raw) is dict:
        pass
    elif isinstance(raw, (str, bytes)):
        try:
            args = parse_arguments(raw)
        except ArgumentsError as exc:
            args, invalid = {}, f"arguments are not a valid JSON object: {exc}"
    elif raw is None:
        args = {}
    elif isinstance(raw, Mapping):
        args = dict(raw)
    else:
        args, invalid = {}, f"arguments must be a JSON object, got {type(raw).__name__}"
    if invalid is None and (deep is not None or (
            type(raw) is not dict and (deep := too_deep(raw, args)) is not None)):
        args, invalid = {}, deep
    settings = entry.settings
    effect, sig, floats, denied = settings.effect, "", False, settings.deny
    plain = 0
    shown = shown and invalid is None
    if invalid is None:
        # A null for an argument the tool does not require is the argument left out: the
        # tool gets its default, so the values it receives are the ones the hash, an
        # approval and an idempotency record stand for.
        # (rare; a null serializes with an "n": a memchr rules most arguments out)
        if (not dumped or 110 in dumped) and None in args.values():
            args, dumped = entry.given(args), b""  # no longer the bytes of these arguments
        # rules see the defaults too: one signature, one effect
        bound = entry.bound(args) if entry.defaults else args
        if settings.rules and (ruled := entry.effect_for(bound)) is not None:
            effect, denied = ruled, False  # a matching rule classifies the call
        elif settings.shell is not None and (
                parsed := classify_argv(bound.get(settings.shell))) is not None:
            effect, denied = parsed, False  # so does a recognised shell command
        # the hash names these very arguments (up to key order) when they serialize as
        # plain JSON and no default was filled in
        exact = bound is args or (len(bound) == len(args) and None not in args.values())
        if not exact:
            dumped = b""  # defaults filled in: not the bytes of these arguments
        try:
            sig, floats, plain = hash_args(bound, settings.args, dumped)
        except CanonicalizationError as exc:
            invalid = f"argument has no canonical form: {exc}"
    unusable = invalid is not None  # no arguments object at all: never executable
    if entry.unknown:  # counted, halted and laddered like any call, but never run
        invalid = f"unknown tool {tool!r}"
        unusable = True
    elif unusable:
        text = raw if isinstance(raw, str) else _safe_repr(raw)
        sig = digest(b"invalid:" + text.strip().encode("utf-8", "replace"))
    else:
        validator = entry.validator
        if validator is not None:
            # valid arguments seen before skip validation (85 µs on 100 KB with
            # jsonschema-rs) when the hash names them exactly
            problems = validator.problems(args, sig if plain and exact else "", plain)
            if problems is not None:
                pattern = cfg.policy.audit.redact_pattern
                invalid = describe(problems, partial(scrub, pattern=pattern))
        # the serialized arguments showed an integral float (rare): convert for int hints
        for name, fix in entry.int_params if floats else ():
            value = args.get(name)
            if fix is None:  # a top-level int: inline, the common case
                if type(value) is float and value.is_integer():
                    args[name] = int(value)
            elif value is not None and (fixed := fix(value)) is not value:
                args[name] = fixed  # a new container: the caller's stays as it was
    mutating = effect is MUTATING
    scope = settings.idempotency_scope
    prepared = _Prepared(  # positional, in _Prepared's order (hot path)
        entry, call_id, raw, args, effect, sig,
        f"{tool}:{sig}",  # signature
        f"{task.task_id}:{tool}:{sig}",  # key
        invalid, unusable,
        # claim; scope off claims too when approval-gated, so that one approval is one
        # execution however many identical calls race for it
        mutating and invalid is None and (
            scope is not SCOPE_OFF or settings.requires_approval),
        scope is SCOPE_TASK,  # task_scope
        denied, None,
        exact_hash(bound, sig) if invalid is None and settings.args else sig,
        scope is not SCOPE_OFF,  # remember
    )
    if shown and dumped and not floats:  # still the bytes of args, which no fix changed
        prepared.text = dumped
    return prepared


def unknown_entry(task: TaskState, cfg: _Config, tool: str) -> _Entry:
    """The entry of a name no registered tool has: read-only (no claim), never run. It
    still goes through the pipeline, so a halted task raises, the call is counted in
    the budgets, and a model repeating it climbs the ladder. At most 1,000 are kept."""
    entry = cfg.unknown.get(tool)
    if entry is None:
        spec = ToolSpec(name=tool, func=_no_such_tool, effect=READONLY)
        entry = replace(task.guard._entry(cfg.policy, spec), unknown=True, in_thread=False)
        if len(cfg.unknown) < 1000:
            cfg.unknown[tool] = entry
    return entry
