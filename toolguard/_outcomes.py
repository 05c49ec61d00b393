"""Which exceptions leave a call's outcome unknown (a timeout: it may or may not have happened).

A mutating call that raises one of ``idempotency.timeout_exceptions`` is recorded as
*unknown*, so an identical retry needs an approval instead of running blind (DESIGN.md §2,
cause 2: "a network timeout arrives after the backend already succeeded").

Names are matched against the exception's class hierarchy (its ``__mro__``), never by
importing anything, so the default list can name the timeout families of HTTP and RPC clients
that may not be installed:

* a bare name (``"Timeout"``) matches a class of that ``__name__`` or ``__qualname__``;
* a dotted name (``"requests.exceptions.Timeout"``, ``"httpx.TimeoutException"``) matches a
  class of that qualified name, or of that name defined in a submodule of the named module
  (``httpx.TimeoutException`` is defined in ``httpx._exceptions``);
* ``"Name:CODE"`` matches such a class only when the exception's ``code()`` (or ``code``)
  is the status ``CODE``: ``grpc.RpcError:DEADLINE_EXCEEDED`` is a gRPC deadline, not every
  RPC failure.

Either way subclasses match: ``requests.exceptions.ReadTimeout`` is a
``requests.exceptions.Timeout``.

A runner that hands a call to a tool running elsewhere and then loses it (the process that ran
it died, it did not answer in time, the caller stopped waiting) raises :class:`OutcomeUnknown`:
an unknown outcome whatever the list says, since no setting can make such a call "not run".
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from typing import Any, Final

__all__ = ["DEFAULT_TIMEOUT_EXCEPTIONS", "OutcomeUnknown", "forwarded_key", "is_transient",
           "is_unknown_outcome"]

DEFAULT_TIMEOUT_EXCEPTIONS: Final = (
    "TimeoutError",  # builtin; also socket.timeout, asyncio.TimeoutError (3.11+)
    "asyncio.TimeoutError",  # a class of its own on Python 3.10
    "requests.exceptions.Timeout",  # ReadTimeout, ConnectTimeout
    "httpx.TimeoutException",  # ReadTimeout, WriteTimeout, ConnectTimeout, PoolTimeout
    "urllib3.exceptions.TimeoutError",  # ReadTimeoutError, ConnectTimeoutError
    "aiohttp.ServerTimeoutError",  # also aiohttp's ConnectionTimeoutError, SocketTimeoutError
    "grpc.FutureTimeoutError",
    "grpc.RpcError:DEADLINE_EXCEEDED",
)


class OutcomeUnknown(Exception):
    """The call was handed to its tool, which can no longer answer: it may or may not have
    happened (the message says why). Recorded as an unknown outcome by every policy."""


_MISSING: Final = frozenset({"<missing>"})
_SEEN: dict[tuple[type, tuple[str, ...]], frozenset[str] | None] = {}


def is_unknown_outcome(exc: BaseException, names: tuple[str, ...]) -> bool:
    """True if ``exc`` is one of ``names`` (see the module docstring for the forms).

    Args:
        exc: the exception a tool raised.
        names: ``idempotency.timeout_exceptions``.
    """
    key = (type(exc), names)
    coded = _SEEN.get(key, _MISSING)
    if coded is _MISSING:
        coded = _matches(type(exc), names)
        if len(_SEEN) < 1024:  # bounded: exception classes made on the fly do not pile up
            _SEEN[key] = coded
    if coded is None:
        return False
    return not coded or _status(exc) in coded


def _matches(cls: type, names: tuple[str, ...]) -> frozenset[str] | None:
    """None if no name matches ``cls``; else the status codes the matching ``Name:CODE``
    names require (empty: some name matched without a code, so any status does)."""
    if issubclass(cls, OutcomeUnknown):
        return frozenset()
    codes: set[str] = set()
    for name in names:
        spelled, _, code = name.partition(":")
        if any(_is(c, spelled) for c in cls.__mro__):
            if not code:
                return frozenset()
            codes.add(code)
    return frozenset(codes) if codes else None


def _is(cls: type, name: str) -> bool:
    qualname = cls.__qualname__
    if name in (cls.__name__, qualname):
        return True
    module = cls.__module__
    if name == f"{module}.{qualname}":
        return True
    prefix, _, tail = name.rpartition(".")
    return bool(prefix) and tail == qualname and module.startswith(f"{prefix}.")


def _status(exc: BaseException) -> str:
    """The status name of an RPC error (``exc.code()`` as gRPC's ``StatusCode`` enum), or ""."""
    code = getattr(exc, "code", None)
    try:
        value = code() if callable(code) else code
    except Exception:  # noqa: BLE001 - a foreign code() that fails: no status
        return ""
    return str(getattr(value, "name", value) or "")


# An error that says the service, not the call, failed for now: an HTTP 429 or 5xx status
# (after a word that names it as one, or with its reason phrase), a rate limit, a timeout, a
# refused or reset connection, "temporarily unavailable", "try again later". Searched in
# the first _TRANSIENT_CHARS characters of the error's text, case-insensitively.
_TRANSIENT: Final = (
    r"(?i)(?:\b(?:http|status|status[ _]code|code|error)[\s:=/]*(?:429|5\d\d)\b"
    r"|\b(?:429|5\d\d)\s+(?:too many requests|internal server error|bad gateway"
    r"|service unavailable|gateway time-?out|server error)"
    r"|too many requests|rate[ -]?limit|service unavailable|temporarily unavailable"
    r"|timed out|\btime-?out\b|deadline exceeded|connection (?:reset|refused|aborted)"
    r"|try again later|please retry|overloaded)"
)
_TRANSIENT_CHARS: Final = 2000
_STATUS_ATTRIBUTES: Final = ("status_code", "status")


def is_transient(content: Any, exc: BaseException | None, extra: Any = None) -> bool:
    """Whether a failed call failed for now rather than for good: an identical retry may
    succeed (rate limits, 5xx, timeouts; the retry policy of HTTP clients and of
    tenacity-style ``retry_if_exception_type``).

    Args:
        content: the failure's content as the model reads it (the error text, or the
            tool's error object).
        exc: the exception the tool raised, or None (an error result).
        extra: the tool's own patterns (``[tools.X.result] transient``), a compiled
            :class:`~toolguard.hashing._regex.PolicyRegex`, or None.

    Returns:
        True for an error with a ``retryable`` flag that is true (an attribute of the
        exception, or a key of the error object at its top level or under ``error``), an
        HTTP status 429 or 5xx on the exception (``status_code``, ``status``,
        ``response.status_code``), a :class:`TimeoutError` or :class:`ConnectionError`, or
        an error text matching the built-in patterns or ``extra``. A ``retryable`` flag that
        is false wins over everything else.
    """
    flag = _retryable(content)
    if flag is None and exc is not None:
        given = getattr(exc, "retryable", None)
        flag = given if isinstance(given, bool) else None
    if flag is not None:
        return flag
    if exc is not None:
        if isinstance(exc, (TimeoutError, ConnectionError)):
            return True
        response = getattr(exc, "response", None)
        for holder, name in ((exc, "status_code"), (exc, "status"), (response, "status_code")):
            status = getattr(holder, name, None) if holder is not None else None
            if isinstance(status, int) and (status == 429 or 500 <= status <= 599):
                return True
    text = content if isinstance(content, str) else _text(content)
    if not text:
        return False
    text = text[:_TRANSIENT_CHARS]
    python, re2 = _transient_regex()
    if (re2(text) if len(text) >= _RE2_FROM_CHARS and text.isascii()
            else python.search(text) is not None):
        return True
    return extra is not None and bool(extra.search(text))


def _retryable(content: Any) -> bool | None:
    if isinstance(content, str) and content.lstrip()[:1] == "{":
        try:
            content = json.loads(content)
        except ValueError:
            return None
    if not isinstance(content, dict):
        return None
    for holder in (content, content.get("error")):
        flag = holder.get("retryable") if isinstance(holder, dict) else None
        if isinstance(flag, bool):
            return flag
    return None


def _text(content: Any) -> str:
    if content is None:
        return ""
    try:
        return json.dumps(content, default=str)
    except (TypeError, ValueError):
        return str(content)


# ASCII text from here on is searched by RE2: Python's re tries the pattern's alternatives
# at every position (~200k instructions for a 150-character error), RE2 on the UTF-8 bytes
# costs a tenth of that; on ASCII text they find the same (RE2's spaces spelled as Python's,
# its word boundary and digits ASCII's either way). Other text: re, with Unicode's meaning.
_RE2_FROM_CHARS: Final = 32


@functools.cache
def _transient_regex() -> tuple[re.Pattern[str], Callable[[str], bool]]:
    """:data:`_TRANSIENT` compiled with re, and the ``search`` of its RE2 spelling for ASCII
    text (:class:`~toolguard.hashing._regex.Rewriter`)."""
    compiled = re.compile(_TRANSIENT)
    from toolguard.hashing._regex import Rewriter, engine

    if engine() == "re":  # pragma: no cover - the wheel exists where CI runs
        return compiled, lambda text: compiled.search(text) is not None
    ascii_space = r"\t-\r\x{1c}-\x{1f} "  # what Python's \s matches in ASCII text
    spelled = _TRANSIENT.replace(r"[\s", f"[{ascii_space}").replace(r"\s", f"[{ascii_space}]")
    return compiled, Rewriter.compile(spelled).search


def forwarded_key(key: str, execution: str) -> str:
    """The idempotency key a tool forwards to its backend (``current_idempotency_key()``):
    the guard's ``key`` (``task:tool:args_hash``) and a digest of the call id of the
    ``execution`` it belongs to. The retry of a call whose outcome is unknown continues that
    execution and forwards its key, so the backend deduplicates; any call the guard lets run
    as a new execution (after the record lapsed at another write, in scope ``off``, after
    its TTL) forwards a new key, so the backend does not drop a real second charge as a
    duplicate."""
    import hashlib  # only a tool that asks for its key: not loaded by import toolguard

    return f"{key}:{hashlib.blake2b(execution.encode(), digest_size=6).hexdigest()}"
