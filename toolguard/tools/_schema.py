"""Argument schemas: derived from type hints (pydantic) or given (``args_schema=``), validated
before execution.

Validators are compiled once per tool. ``jsonschema-rs`` (a dependency; a wheel exists for
every common platform) decides validity and finds the path-located problems of invalid
arguments, which are worded as jsonschema words them. Where no jsonschema-rs wheel exists,
pure-Python jsonschema decides and words the problems, and arguments that validated once are
not validated again (bounded LRU per tool). See benchmarks/README.md for the numbers.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import typing
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, cast

import orjson
import xxhash

if TYPE_CHECKING:
    from cachetools import LRUCache
    from pydantic import ConfigDict

from ._injected import injected_parameters
from ._schema_words import Problem, describe, python_problem, rs_problems

__all__ = ["ArgsValidator", "schema_from_signature"]


def fast_validators() -> Any:
    """The ``jsonschema_rs`` module, or ``None`` where it is not installed (a dependency; absent
    only where no wheel exists for the platform). Imported with the first validator, not with
    ``import toolguard``; kept as the module global ``_rs``, which tests set to ``None`` to run
    the pure-Python fallback."""
    found = globals().get("_rs", _UNSET)
    if found is _UNSET:
        try:
            import jsonschema_rs as found
        except ImportError:  # pragma: no cover - depends on the environment
            found = None
        globals()["_rs"] = found
    return found


_UNSET: Any = object()


def __getattr__(name: str) -> Any:
    if name == "_rs":  # before the first validator: import it now
        return fast_validators()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def schema_from_signature(func: Callable[..., Any]) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of a function's arguments, from its type hints.

    Parameters without a hint accept anything; ``**kwargs`` allows extra properties;
    ``*args``, positional-only parameters and framework-injected ones (a ``RunContext``, a
    ``ToolRuntime``: :mod:`toolguard.tools._injected`) are not part of the JSON interface. A hint
    pydantic cannot express makes that one property unconstrained; the others keep theirs.
    """
    sig = inspect.signature(func)
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # noqa: BLE001 - unresolvable forward references: go without hints
        hints = {}
    injected = injected_parameters(func)
    fields: dict[str, Any] = {}
    extra = False
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            extra = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) or p.name in injected:
            continue
        default = ... if p.default is p.empty else p.default
        fields[p.name] = (hints.get(p.name, Any), default)
    from pydantic import ConfigDict

    config = ConfigDict(extra="allow" if extra else "forbid", arbitrary_types_allowed=True)
    name = f"{getattr(func, '__name__', 'tool')}_arguments"
    schema: dict[str, Any]
    try:
        schema = _model_schema(name, config, fields)
    except Exception:  # noqa: BLE001 - pydantic cannot express a hint: only it goes opaque
        for field, (_, default) in list(fields.items()):
            try:
                _model_schema(name, config, {field: fields[field]})
            except Exception:  # noqa: BLE001 - this hint is the one: accept any value here
                fields[field] = (Any, default)
        try:
            schema = _model_schema(name, config, fields)
        except Exception:  # noqa: BLE001 - together still not expressible: all opaque
            schema = {
                "type": "object",
                "properties": {n: {} for n in fields},
                "required": [n for n, (_, d) in fields.items() if d is ...],
                "additionalProperties": extra,
            }
    schema.pop("title", None)
    _describe_arguments(func, schema)
    return schema


def _describe_arguments(func: Callable[..., Any], schema: dict[str, Any]) -> None:
    """Give each property without a description the one its docstring's ``Args:`` (Google),
    ``Parameters`` (NumPy), ``:param x:`` (reST) or ``@param`` (Epydoc) entry gives."""
    doc = inspect.getdoc(func)
    properties = schema.get("properties")
    if not doc or not isinstance(properties, dict) or not properties:
        return
    import docstring_parser  # deferred: only tools with docstrings pay for it

    try:
        parsed = docstring_parser.parse(doc)
    except docstring_parser.ParseError:
        return
    for param in parsed.params:
        prop = properties.get(param.arg_name)
        if isinstance(prop, dict) and param.description and "description" not in prop:
            prop["description"] = " ".join(param.description.split())


def _model_schema(name: str, config: ConfigDict, fields: dict[str, Any]) -> dict[str, Any]:
    from pydantic import create_model

    model: Any = create_model(name, __config__=config, **fields)
    return dict(model.model_json_schema())



def _refuse_retrieval(uri: str) -> Any:
    """jsonschema-rs's retriever: a tool's schema is self-contained, nothing is fetched."""
    raise ValueError(f"{uri} is not fetched: a tool's argument schema must be "
                     "self-contained (#/$defs/...)")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().split("\n", 1)[0]


def _unresolvable(exc: Exception) -> str:
    # Without jsonschema-rs, jsonschema resolves a $ref only when validation reaches it (and
    # fetches nothing): the call is refused with the reason instead of failing in the guard.
    return f"the tool's argument schema cannot be applied: {_first_line(exc)}"


def schema_error(message: str) -> Exception:
    """A :class:`jsonschema.exceptions.SchemaError` (jsonschema is imported only here, on the
    error path)."""
    from jsonschema.exceptions import SchemaError

    return SchemaError(message)


def _check_schema_type(tool: str, schema: object, where: str) -> None:
    """Refuse an ``args_schema`` that is not a mapping, where it is given.

    Raises:
        TypeError: ``schema`` is not a mapping (nor None); the message names the tool.
    """
    if schema is not None and not isinstance(schema, Mapping):
        raise TypeError(f"{where}: args_schema of tool {tool!r} must be a JSON Schema object "
                        f"(a mapping such as {{\"type\": \"object\", \"properties\": ...}}), "
                        f"got {type(schema).__name__} {schema!r:.60}")


def tool_validator(tool: str, schema: object, where: str) -> ArgsValidator:
    """The :class:`ArgsValidator` of one tool's ``args_schema``, its errors naming the tool.

    Raises:
        TypeError: ``schema`` is not a mapping.
        jsonschema.exceptions.SchemaError: ``schema`` does not compile; the message names
            the tool and ``where``, then what is wrong.
    """
    _check_schema_type(tool, schema, where)
    try:
        return ArgsValidator(cast(Mapping[str, Any], schema))
    except Exception as exc:
        if not _is_schema_error(exc):
            raise
        raise schema_error(f"{where}: args_schema of tool {tool!r} is not a usable JSON "
                           f"Schema: {_schema_problem(schema) or getattr(exc, 'message', exc)}"
                           ) from None


def _schema_problem(schema: Any) -> str | None:
    """Where the schema breaks its metaschema, and how (``at $.type: 'objekt' is not valid
    under any of the given schemas``), by jsonschema's ``best_match``; None when the
    metaschema holds (an unresolvable ``$ref``: the compiler's message says it) or the
    schema cannot even be checked."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match
    from jsonschema.validators import validator_for

    try:
        cls: Any = validator_for(schema, default=Draft202012Validator)
        error = best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    except Exception:  # noqa: BLE001 - "$schema": 5, a schema nested too deeply
        return None
    return None if error is None else f"at {error.json_path}: {error.message}"


def _is_schema_error(exc: BaseException) -> bool:
    module = sys.modules.get("jsonschema.exceptions")
    return module is not None and isinstance(exc, module.SchemaError)


def _unresolvable_ref(exc: BaseException) -> bool:
    from referencing.exceptions import Unresolvable

    return isinstance(exc, Unresolvable)


_UNSEEN: Any = object()
RS_MEMO_BYTES: Final = 512
"""With jsonschema-rs, arguments of this many serialized bytes or more are memoized by their
``known`` key (:meth:`ArgsValidator.problems`)."""
_SMALL_CHARS = 256


def _small(value: Any) -> bool:
    """Whether a memo may keep ``value``: a scalar, a string of at most 256 characters."""
    return value is None or isinstance(value, (bool, int, float)) or (
        isinstance(value, str) and len(value) <= _SMALL_CHARS)


class ArgsValidator:
    """A compiled validator for one tool's arguments.

    Args:
        schema: a JSON Schema of the arguments object (draft 2020-12 assumed unless
            ``$schema`` says otherwise).
        cache_size: how many judged signatures to remember (valid ones, and invalid ones whose
            problems quote only small values).

    Thread-safe for concurrent ``validate`` calls (the LRU is only a hint: a lost update
    means one extra validation).
    """

    def __init__(self, schema: Mapping[str, Any], cache_size: int = 1024) -> None:
        self.schema = dict(schema)
        self._validator: Any = None  # jsonschema's: built when a message is needed
        try:
            self._compile()
        except RecursionError:
            raise schema_error("the schema is nested too deeply") from None
        except Exception as exc:
            if _is_schema_error(exc):
                raise
            # e.g. "$schema": 5 (AttributeError)
            raise schema_error(f"not a usable schema: {type(exc).__name__}: "
                               f"{_first_line(exc)}") from None
        from cachetools import LRUCache  # with the first guard, not with import toolguard

        self._seen: LRUCache[bytes | str, Any] = LRUCache(maxsize=cache_size)

    def _compile(self) -> None:
        rs = fast_validators()
        if rs is None:
            self._fast = None
            self._py(check=True)
            return
        try:  # checks the schema and compiles every $ref now: one that does not resolve fails
            self._fast = rs.validator_for(self.schema, retriever=_refuse_retrieval)
        except Exception as exc:  # noqa: BLE001 - a schema jsonschema-rs cannot use
            raise schema_error(f"the schema does not compile: {_first_line(exc)}") from None

    def _py(self, *, check: bool = False) -> Any:
        """jsonschema's validator of the schema (built on first use: messages, fallback)."""
        if self._validator is None:
            from jsonschema import Draft202012Validator
            from jsonschema.validators import validator_for
            from referencing import Registry

            cls: Any = validator_for(self.schema, default=Draft202012Validator)
            if check:
                cls.check_schema(self.schema)
            # An empty registry: jsonschema would otherwise fetch a remote $ref over HTTP
            # (its deprecated default); a tool's schema is self-contained.
            self._validator = cls(self.schema, registry=Registry())
        return self._validator

    def validate(self, args: Mapping[str, Any], known: str = "", size: int = 0) -> str | None:
        """Validate ``args``; ``None`` if valid, else a short message listing each failing
        path and what was expected (at most 8 problems), meant for the model: the
        :func:`describe` of :meth:`problems`."""
        found = self.problems(args, known, size)
        return None if found is None else describe(found)

    def problems(self, args: Mapping[str, Any], known: str = "", size: int = 0
                 ) -> list[Problem] | None:
        """Validate ``args``; ``None`` if valid, else each problem found.

        Arguments seen valid before skip validation when they come with a memo key: ``known``,
        a key that determines ``args`` exactly up to the order of keys (the engine passes the
        canonical hash of arguments that serialized as plain JSON, nothing dropped or
        rewritten: not the hash of arguments with nulls, which folds them away, while
        ``{"n": null}`` may be invalid where ``{}`` is valid); else, without jsonschema-rs,
        a hash of the exact arguments (nulls included). With jsonschema-rs the key serves
        from :data:`RS_MEMO_BYTES` of serialized arguments: it decides smaller ones
        (~0.1 µs) faster than a memo look-up (~0.4 µs), and 100 KB in ~85 µs; without a
        ``known`` key there is no memo: deciding validity is cheaper than computing a key.

        Args:
            args: the arguments object. known: the memo key, or ``""``. size: the size in
                bytes of the serialized arguments ``known`` names.

        Returns:
            ``None``, or ``(instance path, message, offending value)`` triples: jsonschema-rs
            finds them where it can judge the arguments (JSON values), jsonschema otherwise;
            the messages are jsonschema's words either way.
        """
        fast = self._fast
        if fast is not None and size < RS_MEMO_BYTES:  # no memo: decided at once
            try:
                if fast.is_valid(args):
                    return None
            except (ValueError, TypeError):
                pass  # not JSON (a direct call's typed values): judged below
            return self._find(args)
        signature: bytes | str = known
        if not known and fast is None:
            # not plain JSON (a direct call with Python objects): no memo
            with contextlib.suppress(TypeError, orjson.JSONEncodeError):
                signature = xxhash.xxh3_128_digest(
                    orjson.dumps(args, option=orjson.OPT_SORT_KEYS))
        if signature:
            seen = self._seen.get(signature, _UNSEEN)
            if seen is not _UNSEEN:
                return cast("list[Problem] | None", seen)
        found = self._find(args)
        if signature and (found is None or all(_small(quoted) for _, _, quoted in found)):
            self._seen[signature] = found  # valid, or problems that pin no large value
        return found

    def _find(self, args: Mapping[str, Any]) -> list[Problem] | None:
        fast = self._fast
        if fast is None:
            found = self._find_py(args)
            return None if found is None else self._typed(args, found)
        try:
            if fast.is_valid(args):
                return None
        except (ValueError, TypeError):  # not JSON: a direct call's typed values
            return self._typed(args, None)
        tops = sorted(fast.iter_errors(args), key=lambda e: list(e.instance_path))
        return [problem for top in tops for problem in rs_problems(top)]

    def _find_py(self, args: Mapping[str, Any]) -> list[Problem] | None:
        try:
            errors = sorted(self._py().iter_errors(args), key=lambda e: list(e.absolute_path))
        except Exception as exc:
            if _unresolvable_ref(exc):
                return [(None, _unresolvable(exc), None)]
            raise
        return [problem for top in errors for problem in python_problem(top)] or None

    def _typed(self, args: Mapping[str, Any], found: list[Problem] | None
               ) -> list[Problem] | None:
        """A direct call may pass typed values (an Enum, a date, a dataclass, a pydantic
        model) that the JSON Schema cannot judge as Python objects: judge their JSON form, the
        one a model would send, which the tool then receives converted by pydantic. ``found``:
        the problems jsonschema saw in the objects themselves (``None``: jsonschema-rs could
        not read them); they stand when the arguments have no other JSON form."""
        from pydantic_core import to_jsonable_python

        try:
            as_json = to_jsonable_python(args)
        except Exception:  # noqa: BLE001 - no JSON form: judged as they are
            as_json = args
        if as_json == args:
            return found if found is not None else self._find_py(args)
        return self._find(as_json)
