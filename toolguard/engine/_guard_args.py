"""The arguments of :class:`~toolguard.Guard` and :meth:`~toolguard.Guard.reload_policy`,
checked where they are given: a policy or its path, the approver, the audit sinks, and the
store back-end the policy's ``[store]`` asks for. A refusal names the argument and what it
takes, so a mistake fails at construction, not on the first call that uses it."""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from toolguard._errors import PolicyError, PolicyProblem

if TYPE_CHECKING:
    from toolguard.policy._model import Policy

    from ._audit import AuditSink

__all__ = ["as_policy", "audit_sinks", "check_approver", "store_kind"]


def as_policy(policy: object, where: str) -> Policy:
    """``policy`` as :class:`Guard` and :meth:`Guard.reload_policy` take it: a Policy as is,
    a path (``str``/``os.PathLike``) loaded with :func:`toolguard.load_policy`.

    Raises:
        TypeError: anything else, naming what ``where`` takes.
        PolicyError: the file is invalid.
    """
    from toolguard.policy._model import Policy

    if isinstance(policy, Policy):
        return policy
    if isinstance(policy, str | os.PathLike):
        from toolguard.policy._loader import load_policy

        return load_policy(policy)
    hint = (": for a mapping, pass toolguard.load_policy_dict(...)"
            if isinstance(policy, Mapping) else "")
    raise TypeError(f"{where} takes a toolguard.Policy or a policy file's path (str or "
                    f"os.PathLike), got {type(policy).__name__}{hint}")


_APPROVER = ("a callable taking an ApprovalRequest and returning an ApprovalDecision or an "
             "awaitable of one (e.g. toolguard.ConsoleApprover())")
_SINK = ("a callable taking an AuditEvent (e.g. toolguard.MemorySink(), "
         "toolguard.JsonlSink(path), toolguard.LoggingSink())")


def _check_one_argument(value: object, where: str, expected: str) -> None:
    """Refuse, at construction, what cannot be called with one argument (a call would
    otherwise fail on every event or approval, far from the mistake).

    Raises:
        TypeError: ``value`` is not callable, or its signature cannot take one positional
            argument; the message names ``where`` and what is ``expected``.
    """
    if not callable(value):
        raise TypeError(f"{where} must be {expected}, got {type(value).__name__} {value!r}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without a signature: it may well be fine
        return
    try:
        signature.bind(None)
    except TypeError as error:
        raise TypeError(f"{where} must be {expected}; {value!r} cannot be called with one "
                        f"argument ({error})") from None


def check_approver(approver: object) -> None:
    """Refuse an approver that cannot be called with one argument (see
    :func:`_check_one_argument`).

    Raises:
        TypeError: as :func:`_check_one_argument` raises it, for ``Guard(approver=)``.
    """
    _check_one_argument(approver, "Guard(approver=)", _APPROVER)


def audit_sinks(audit: object) -> tuple[AuditSink, ...]:
    """``Guard(audit=)`` as a tuple of sinks, each checked (see :func:`_check_one_argument`).

    Raises:
        TypeError: ``audit`` is not an iterable of sinks (a single sink: wrap it in a list).
    """
    if not isinstance(audit, Iterable) or isinstance(audit, str | bytes | Mapping):
        single = " (a single sink: pass audit=[sink])" if callable(audit) else ""
        raise TypeError(f"Guard(audit=) takes an iterable of sinks, each {_SINK}; got "
                        f"{type(audit).__name__}{single}")
    sinks = tuple(audit)
    for index, sink in enumerate(sinks):
        _check_one_argument(sink, f"Guard(audit=)[{index}]", _SINK)
    return sinks


def store_kind(policy: Policy) -> str:
    """The back-end the policy's ``[store]`` asks for: its ``backend`` when one is named
    (it must agree with the URL's scheme), else the URL's scheme (``sqlite:`` or Redis),
    else ``memory``.

    Raises:
        PolicyError: a URL that the named back-end cannot use.
    """
    url = policy.store.url
    scheme = ("sqlite" if url.startswith("sqlite:") else "redis") if url else None
    backend = policy.store.backend
    if policy.source_of("store.backend") == "built-in":
        return scheme or backend
    if scheme is not None and scheme != backend:
        named = {"sqlite": "a SQLite URL", "redis": "a Redis URL"}[scheme]
        fix = ("drop the URL" if backend == "memory" else
               f"give a {'sqlite:' if backend == 'sqlite' else 'redis://'} URL")
        raise PolicyError([PolicyProblem(
            policy.source_of("store.url"), "store.url",
            f"{named} is set, but store.backend = \"{backend}\" "
            f"({policy.source_of('store.backend')}): set store.backend = \"{scheme}\" "
            f"(TOOLGUARD_STORE__BACKEND={scheme}) or {fix}")])
    return backend
