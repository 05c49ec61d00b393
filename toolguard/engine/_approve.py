"""The approval stage's I/O: the request shown to the approver, the approver's answer (sync
or async, bounded by ``approval.timeout_s``, a failing approver is a ``defer``), storing the
decision, and the host's own ``approve`` / ``reject``. The decision itself is pure
(``_core``)."""

from __future__ import annotations

import contextvars
import inspect
import logging
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import orjson

from toolguard._errors import CanonicalizationError, StoreError
from toolguard._types import (
    ALLOW,
    BLOCK,
    REVIEW,
    UNKNOWN,
)
from toolguard.hashing._canonical import args_hash
from toolguard.hashing._redact import redact
from toolguard.stores._base import (
    ApprovalRecord,
    ApprovalState,
    RetryRequest,
    Snapshot,
)
from toolguard.stores.memory import MemoryStore

from . import _events, _storeops
from ._approval import (
    ApprovalDecision,
    ApprovalRequest,
    Approver,
    defer,
)
from ._approval_secret import load_secret, proof, secret_path, valid
from ._call import _Config, _Prepared
from ._content import safe_repr as _safe_repr
from ._content import safe_str as _safe_str
from ._core import Verdict
from ._limits import oversized

if TYPE_CHECKING:
    from ._call import TaskState

log = logging.getLogger("toolguard")

MAX_KEPT_ARGS_BYTES: Final = 65_536
"""An approval record keeps a call's arguments in full up to this many bytes (compact JSON);
larger ones as a redacted preview of :data:`PREVIEW_CHARS` characters, so that waiting
calls cannot pin memory or store space (300 pending 1 MB calls pinned 303 MB). The approver
asked in process still gets them in full; ``toolguard approve`` refuses to approve a call it
cannot show whole."""
PREVIEW_CHARS: Final = 2_000
TRUNCATED: Final = "$truncated"
"""The key that marks kept arguments as a preview: ``{TRUNCATED: size, "preview": text}``."""


def discard(awaitable: Awaitable[Any]) -> None:
    """Close an awaitable nobody will await (a sync call got one), if it can be closed."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        close()


def kept_args(cfg: _Config, args: Mapping[str, Any]) -> dict[str, Any]:
    """What an approval record keeps of ``args`` (:data:`MAX_KEPT_ARGS_BYTES`)."""
    if oversized(args, MAX_KEPT_ARGS_BYTES) is None:
        return dict(args)
    audit = cfg.policy.audit
    shown = orjson.dumps(redact(args, audit.redact_pattern, audit.max_value_chars),
                         default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    size = len(orjson.dumps(args, default=str, option=orjson.OPT_NON_STR_KEYS))
    return {TRUNCATED: size, "preview": shown[:PREVIEW_CHARS]}


def ask(approver: Approver, request: ApprovalRequest) -> Any:
    """The approver's answer, or a ``defer`` saying why there is none: a failing or
    misbehaving approver never runs the call and never breaks the guard."""
    try:
        return approver(request)
    except Exception as exc:  # the approver is user code: any failure
        log.warning("toolguard: the approver failed for %s", request.tool, exc_info=True)
        return _approver_failed(exc)


async def _ask_awaited(approver: Approver, request: ApprovalRequest) -> Any:
    answer = ask(approver, request)
    return await answer if inspect.isawaitable(answer) else answer


def _approver_failed(exc: Exception) -> ApprovalDecision:
    return defer(f"the approver failed ({type(exc).__name__}: {_safe_str(exc)})")


def _answer(answer: Any) -> ApprovalDecision:
    if isinstance(answer, ApprovalDecision):
        if answer.verdict in ("approve", "reject", "defer"):
            return answer
        # ApprovalDecision("yes"): not a decision. Taken as approve, it would bypass the
        # reviewer's intent; looped on, it asked the approver millions of times.
        return defer(f"the approver answered the verdict {_safe_repr(answer.verdict, 40)}, "
                     "not approve, reject or defer")
    return defer(f"the approver answered {_safe_repr(answer, 60)}, not an ApprovalDecision")


def sync_answer(answer: Any) -> ApprovalDecision:
    if inspect.isawaitable(answer):
        discard(answer)
        return defer("the approver is async: call the tool with task.acall()")
    return _answer(answer)


_SECRETS: dict[str, bytes] = {}  # approval secret by file path: read once per process


def _secret(task: TaskState) -> bytes | None:
    """The approval secret that signs and checks approvals in the guard's store; ``None``
    for a memory store (only this process writes it: nothing to prove).

    Raises:
        ApprovalSecretError: the secret file cannot be used.
    """
    if isinstance(task.guard._store, MemoryStore):
        return None
    path = secret_path()
    secret = _SECRETS.get(str(path))
    if secret is None:
        secret = _SECRETS[str(path)] = load_secret(path)
    return secret


def signed(task: TaskState, key: str, record: ApprovalRecord) -> ApprovalRecord:
    """``record`` with the proof of its decision when it approves and the store is shared."""
    if record.state != ApprovalState.APPROVED:
        return record
    secret = _secret(task)
    if secret is None:
        return record
    return replace(record, proof=proof(secret, key, record.state, record.args_hash,
                                       shown_hash(record.args)))


def checked(task: TaskState, cfg: _Config, p: _Prepared, approval: ApprovalRecord
            ) -> ApprovalRecord:
    """An approval read from the store for call ``p``, or the pending request it stands for
    when its proof does not hold for ``p``'s own arguments: written by someone without the
    approval secret, or signed for arguments other than the ones about to run (the record's
    arguments rewritten in the store before a reviewer was shown them). Neither is a
    human's decision about this call."""
    secret = _secret(task)
    if secret is None or valid(secret, approval.proof, p.key, approval.state, p.exact,
                               shown_hash(kept_args(cfg, p.args))):
        return approval
    log.warning("toolguard: an approval of %s without a valid proof for its arguments was "
                "ignored", approval.tool)
    return replace(approval, state=ApprovalState.PENDING, proof="")


def shown_hash(args: Mapping[str, Any]) -> str:
    """The canonical hash of arguments as an approval record keeps them (what a reviewer is
    shown): the same for the call's own arguments and for their JSON round trip through a
    store; ``""`` for arguments without a canonical form."""
    try:
        return args_hash(args)
    except CanonicalizationError:
        return ""


def _waiting(task: TaskState, key: str, revoke: bool = False) -> ApprovalRecord:
    """The request a human decides: a call the guard asked about that has not run on an
    approval (pending, or rejected, which a human may overturn; with ``revoke``, also
    approved and not run yet, which a human may take back).

    Raises:
        ValueError: no call of the task is waiting under ``key``.
    """
    record = task.guard._store.approvals(task.task_id).get(key)
    states = (ApprovalState.PENDING, ApprovalState.REJECTED) + (
        (ApprovalState.APPROVED,) if revoke else ())
    if record is None or record.state not in states:
        raise ValueError(f"no call is waiting for approval under {key!r}: only a call the "
                         "guard asked about can be approved (no approval in advance)")
    return record


def decide_approval(task: TaskState, key: str, state: str, reason: str) -> None:
    prefix = f"{task.task_id}:"
    if not isinstance(key, str) or not key.startswith(prefix):
        raise ValueError(f"key {key!r} does not belong to task {task.task_id!r}")
    waiting = _waiting(task, key, revoke=state == ApprovalState.REJECTED)
    record = signed(task, key, ApprovalRecord(state, waiting.requested_at, reason,
                                               waiting.tool, waiting.args, waiting.args_hash))
    task.guard._store.set_approval(task.task_id, key, record,
                                   task.guard._config.policy.idempotency.ttl_s)
    approved = state == ApprovalState.APPROVED
    # a human decided (DESIGN.md §2): needs_review -> executing (its next attempt runs)
    # or -> failed; the key names the call, whose attempts carry the same args_hash
    _events.event(task, "needs_review->executing" if approved else "needs_review->failed",
                record.tool, ALLOW if approved else BLOCK,
                f"{'approved' if approved else 'rejected'} by the host: {key}"
                + (f" ({reason})" if reason else ""))


def approval_request(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot,
                      verdict: Verdict) -> ApprovalRequest:
    requested = snap.approval.requested_at if snap.approval else task.guard._clock()
    # the reviewer sees every value in full (redaction is for audit and logs)
    return ApprovalRequest(task.task_id, p.entry.spec.name, dict(p.args), p.key,
                           verdict.reason, requested)


def store_approval(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot,
                    req: ApprovalRequest, answer: ApprovalDecision) -> Snapshot:
    state = {"approve": ApprovalState.APPROVED, "reject": ApprovalState.REJECTED}.get(
        answer.verdict, ApprovalState.PENDING)
    record = signed(task, p.key, ApprovalRecord(state, req.requested_at, answer.reason,
                                                 req.tool, kept_args(cfg, req.args), p.exact))
    _storeops.store_op(task, cfg, p, lambda: task.guard._store.set_approval(
        task.task_id, p.key, record, cfg.policy.idempotency.ttl_s), fallback=lambda: None)
    _events.event(task, "validating->needs_review", p.entry.spec.name, REVIEW,
                f"approval: {answer.verdict}"
                + (f" ({answer.reason})" if answer.reason else ""), p=p, cfg=cfg,
                count=snap.count)
    return snap._replace(approval=record)


def spend_approval(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot) -> None:
    """One approval, one execution ("its next identical attempt executes"): spent
    before the tool runs, while this call holds the claim, so an identical call that
    waited on it asks again instead of running on the same approval."""
    if snap.approval is not None and snap.approval.state == ApprovalState.APPROVED:
        used = replace(snap.approval, state=ApprovalState.USED)
        _storeops.store_op(task, cfg, p, lambda: task.guard._store.set_approval(
            task.task_id, p.key, used, p.entry.settings.idempotency_ttl_s))


def retries_unknown(p: _Prepared, snap: Snapshot) -> bool:
    """The call about to run is the approved retry of an identical call whose outcome is
    unknown: it must hold the key's claim while it runs (:func:`take_unknown`)."""
    record = snap.record
    return (record is not None and record.state is UNKNOWN and p.claim and not snap.claimed
            and not p.entry.settings.forwards_idempotency_key)


def take_unknown(task: TaskState, cfg: _Config, p: _Prepared, snap: Snapshot
                 ) -> Snapshot | None:
    """The approved retry of an unknown outcome takes the key's claim and spends its
    approval in one atomic store operation (:meth:`~toolguard.stores.Store.retry_unknown`),
    so an identical call meanwhile waits for it as for any write in progress. Returns the
    snapshot it runs on (it holds the claim), or None: another approved retry took the
    claim first (or the record changed), and this call decides again once that settles.
    Failing open, the retry runs without the claim (``snap`` as it is)."""
    record, approval = snap.record, snap.approval
    assert record is not None  # retries_unknown
    assert approval is not None  # decided the call approved
    store = task.guard._store
    used = replace(approval, state=ApprovalState.USED)
    req = RetryRequest(p.key, record.call_id, p.call_id, used, task.guard._clock(),
                       cfg.claim_ttl_s, p.entry.settings.idempotency_ttl_s)

    def retry() -> bool | None:
        take = getattr(store, "retry_unknown", None)
        if take is None:
            raise StoreError(f"{type(store).__name__} has no retry_unknown: the approved "
                             f"retry of {p.entry.spec.name}, whose earlier outcome is "
                             "unknown, cannot hold its claim (see toolguard.stores.Store)")
        return bool(take(task.task_id, req))

    won = _storeops.store_op(task, cfg, p, retry, fallback=lambda: None)
    if won is None:  # the store failed open: the retry runs unguarded, without the claim
        return snap
    return snap._replace(approval=used, claimed=True) if won else None


async def ask_async(task: TaskState, approver: Approver, request: ApprovalRequest
                    ) -> ApprovalDecision:
    """The approver's answer under ``acall``. A plain approver (``ConsoleApprover``, a
    blocking HTTP call) runs in a worker thread, as a sync tool does, so the event loop
    goes on; any approver that has not answered after ``approval.timeout_s`` counts as a
    ``defer`` (the call waits in review, and halts once that timeout passes)."""
    import asyncio

    limit = task.guard._config.policy.approval.timeout_s
    call = getattr(approver, "__call__", approver)  # noqa: B004 - instances too
    try:
        if inspect.iscoroutinefunction(approver) or inspect.iscoroutinefunction(call):
            answer = await asyncio.wait_for(_ask_awaited(approver, request), limit)
        else:
            loop = asyncio.get_running_loop()
            context = contextvars.copy_context()
            answer = await asyncio.wait_for(loop.run_in_executor(
                None, context.run, ask, approver, request), limit)
            if inspect.isawaitable(answer):  # a plain function returning an awaitable
                answer = await asyncio.wait_for(answer, limit)
    except asyncio.TimeoutError:
        return defer(f"the approver did not answer within approval.timeout_s "
                     f"({limit:g} s)")
    except Exception as exc:  # noqa: BLE001 - the approver is user code
        return _approver_failed(exc)
    return _answer(answer)
