"""The canonical walk: the normalized JSON-native form of a value (:func:`canonicalize`, the
rules in :mod:`toolguard.hashing._canonical`'s docstring) and the per-argument policy
options applied before it (:func:`apply_arg_options`, :func:`normalize_path`)."""

from __future__ import annotations

import dataclasses
import enum
import math
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol

import orjson

from toolguard._errors import CanonicalizationError

if TYPE_CHECKING:
    import decimal

__all__ = ["apply_arg_options", "canonicalize", "fields_of", "normalize_path"]


class ArgOptions(Protocol):
    """What the walk reads of one argument's policy options (``toolguard.policy._model.ArgOptions``,
    the ``[tools.X.args.NAME]`` table): a protocol, so that hashing does not import the policy."""

    @property
    def ignore(self) -> bool: ...
    @property
    def normalize(self) -> str | None: ...
    @property
    def case(self) -> str: ...


_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1


def normalize_path(value: str) -> str:
    """Fold the spellings of one path: ``\\`` → ``/``, repeated ``/``, ``./`` segments and a
    trailing ``/`` (the root ``/`` stays). ``C:\\a\\.\\b\\`` → ``C:/a/b``."""
    slashed = value.replace("\\", "/")
    parts = slashed.split("/")
    kept = [p for i, p in enumerate(parts) if p != "." and (p or i == 0)]
    out = "/".join(kept)
    if not out and slashed.startswith("/"):
        return "/"
    if slashed.startswith("//") and not slashed.startswith("///"):
        out = "/" + out  # a UNC path (\\server\share) keeps its two leading slashes
    return out or "."


def _apply_option(value: Any, opt: ArgOptions) -> Any:
    if isinstance(value, str):
        if opt.normalize == "path":
            value = normalize_path(value)
        elif opt.normalize == "whitespace":
            value = " ".join(value.split())
        if opt.case == "insensitive":
            value = value.casefold()
        return value
    if isinstance(value, (list, tuple)):
        return [_apply_option(v, opt) for v in value]
    return value


def apply_arg_options(args: Mapping[str, Any], options: Mapping[str, ArgOptions]) -> dict[str, Any]:
    """Apply per-argument policy options (ignore / normalize / case) to top-level arguments."""
    out = dict(args)
    for name, opt in options.items():
        if name not in out:
            continue
        if opt.ignore:
            del out[name]
        elif opt.normalize is not None or opt.case == "insensitive":
            out[name] = _apply_option(out[name], opt)
    return out


def canonicalize(value: Any, path: str = "args") -> Any:
    """Return the normalized JSON-native form of ``value`` (see the module docstring).

    Raises:
        CanonicalizationError: a value with no canonical form, naming its ``path``.
    """
    try:
        try:
            return _walk(value, None)  # no path strings: only an error needs them
        except CanonicalizationError:
            return _walk(value, path)  # again, naming the path (raises the same error)
    except RecursionError:
        raise CanonicalizationError(path, "nested too deeply (recursive structure?)") from None


def _walk(value: Any, path: str | None) -> Any:
    """The walk of :func:`canonicalize`. ``path`` names ``value`` in errors; ``None`` skips
    building the path strings (a formatted string per element, a third of the walk)."""
    kind = type(value)
    if kind is dict or kind is list:  # exact JSON types first: the ABC checks below are slow
        return _walk_container(value, path)
    if kind is str:
        return _walk_str(value, path)
    # Order matters: bool before int, Enum before str/int.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, enum.Enum):
        return _walk(value.value, path)
    if isinstance(value, str):
        return _walk_str(value, path)
    if isinstance(value, int):
        value = int(value)
        if _I64_MIN <= value <= _U64_MAX:
            return value
        try:
            return {"$int": str(value)}
        except ValueError:  # past sys.get_int_max_str_digits() (4,300 by default)
            raise CanonicalizationError(
                path or "args", f"an integer of about {value.bit_length() * 0.30103:,.0f} "
                "digits is beyond the interpreter's limit for integer text") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CanonicalizationError(path or "args", f"{value!r} is not a finite number "
                                        "(NaN and Infinity have no JSON form)")
        if value.is_integer():
            return _walk(int(value), path)
        return float(value)
    if isinstance(value, (Mapping, list, tuple)):
        return _walk_container(value, path)
    if isinstance(value, (set, frozenset)):
        items = [_walk(item, None if path is None else f"{path}{{}}") for item in value]
        return sorted(items, key=lambda v: orjson.dumps(v, option=orjson.OPT_SORT_KEYS))
    if isinstance(value, (bytes, bytearray, memoryview)):
        import base64

        return {"$bytes": base64.b64encode(bytes(value)).decode("ascii")}
    # A Decimal, date or UUID exists only once its module is loaded: ``import toolguard``
    # does not load them (decimal, datetime and uuid, with platform, cost ~5 ms).
    modules = sys.modules
    decimal = modules.get("decimal")
    if decimal is not None and isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise CanonicalizationError(path or "args", f"Decimal {value} is not finite")
        return {"$decimal": _decimal_text(value)}
    dt = modules.get("datetime")
    if dt is not None and isinstance(value, dt.datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=dt.timezone.utc)
        try:
            return {"$datetime": aware.astimezone(dt.timezone.utc).isoformat()}
        except OverflowError:
            raise CanonicalizationError(path or "args",
                                        f"{value.isoformat()} is out of range in UTC") from None
    if dt is not None and isinstance(value, dt.date):
        return {"$date": value.isoformat()}
    if dt is not None and isinstance(value, dt.time):
        return {"$time": value.isoformat()}
    uuid = modules.get("uuid")
    if uuid is not None and isinstance(value, uuid.UUID):
        return str(value)
    pathlib = modules.get("pathlib")
    if pathlib is not None and isinstance(value, pathlib.PurePath):
        return {"$path": value.as_posix()}
    structured = fields_of(value)
    if structured is not None:
        tag, fields = structured
        return {tag: _qualname(value), "fields": _walk(fields, path)}
    raise CanonicalizationError(
        path or "args",
        f"no canonical form for {type(value).__module__}.{type(value).__qualname__} "
        "(pass JSON-like values, or a dataclass / pydantic model)",
    )


def fields_of(value: Any) -> tuple[str, dict[str, Any]] | None:
    """A dataclass instance's or a pydantic model's fields by name, with the tag of its
    canonical form (``"$dataclass"`` / ``"$model"``); ``None`` for anything else. Also what
    the audit redacts field by field."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return "$dataclass", {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    model_fields = getattr(type(value), "model_fields", None)
    if isinstance(model_fields, dict) and hasattr(value, "model_dump"):
        return "$model", {name: getattr(value, name, None) for name in model_fields}
    return None


def _walk_str(value: str, path: str | None) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise CanonicalizationError(path or "args", "string is not valid Unicode (lone "
                                                    "surrogate)") from None
    return str(value)


def _walk_container(value: Any, path: str | None) -> Any:
    """A mapping (keys checked, ``$`` keys escaped; a null is a value, kept: only the
    top-level nulls of a call's arguments are dropped, by the caller) or a list/tuple."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str) or isinstance(key, enum.Enum):
                raise CanonicalizationError(
                    f"{path}[{key!r}]", f"object keys must be strings, got {type(key).__name__}"
                )
            name = str(key)
            out["$" + name if name.startswith("$") else name] = (
                None if item is None else _walk(item, None if path is None else f"{path}.{key}"))
        return out
    if path is None:
        return [_walk(item, None) for item in value]
    return [_walk(item, f"{path}[{i}]") for i, item in enumerate(value)]


def _decimal_text(value: decimal.Decimal) -> str:
    # Exact and independent of the decimal context (Decimal.normalize() rounds to the
    # context's precision): significant digits without trailing zeros, then the exponent.
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, checked by the caller
    coefficient = "".join(map(str, digits)).lstrip("0")
    if not coefficient:
        return "0"
    stripped = coefficient.rstrip("0")
    exponent += len(coefficient) - len(stripped)
    return f"{'-' if sign else ''}{stripped}E{exponent}"


def _qualname(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
