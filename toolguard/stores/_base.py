"""The store port: every piece of per-task state lives behind these few atomic operations.

Requests and snapshots are named tuples: immutable like frozen dataclasses, but several
times cheaper to build, and three are built on every call.

After AWS Powertools' idempotency persistence layer (a port with a few atomic primitives and
explicit record states), widened to everything the engine keeps per task: signature history
and ladder counts, idempotency records, budget counters, the halted flag and approvals.

The hot path is two operations: :meth:`Store.begin` (count the attempt, read what the
decision needs, claim the idempotency key) and :meth:`Store.finish` (record the outcome). A
call answered from the idempotency cache needs only ``begin``. Each is atomic: two workers
racing on one signature see consistent counts and exactly one of them claims the key.

A claim that outlives its TTL (``BeginRequest.claim_ttl_s``) without a finish is an
*unknown* outcome, never a lapsed one: its call was handed to the tool and then lost (the
host never reported it, the worker crashed), so it may have happened. From then on the
key's record reads as ``unknown`` for ``BeginRequest.ttl_s`` seconds (the tool's
idempotency TTL, as a finished unknown outcome is kept), and an identical mutating call
goes to review (or, for a tool that forwards its idempotency key, continues the same
execution) instead of running a second time. The claim's own call may still report late:
a result completes the record, a release (it failed, it did not run) drops it.

A retry of such a call that a human approved runs holding the key's claim, like any other
write: :meth:`Store.retry_unknown` turns the unknown record into this retry's claim and
spends its approval in one atomic step, so an identical call meanwhile waits for it (and
shares its result), and of two retries approved at once exactly one runs.

Every back-end passes one contract suite (``tests/stores/test_store_contract.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple, Protocol, runtime_checkable

from toolguard._types import RecordState

# A named tuple built from all its fields, in order, without the Python function that is its
# __new__ (0.2 µs per tuple on the hot path): ``new_tuple(Snapshot, (f1, f2, ...))``.
new_tuple = tuple.__new__

__all__ = [
    "CYCLE_CALLS",
    "ApprovalRecord",
    "ApprovalState",
    "BeginRequest",
    "FinishRequest",
    "IdempotencyRecord",
    "RetryRequest",
    "Snapshot",
    "Store",
    "TaskUsage",
]


CYCLE_CALLS: Final = 4
"""A stagnation run remembers its last ``CYCLE_CALLS - 1`` signatures: a call with one of
them again is part of a cycle of at most ``CYCLE_CALLS`` calls (an A/B alternation of two
argument sets, A B C A B C), which the repeat ladder judges; it does not grow the run."""


def stagnation_recent(recent: str, signature: str) -> str:
    """A run's ``recent`` signatures (newline-separated, oldest first) with ``signature``
    added, the oldest beyond ``CYCLE_CALLS - 1`` dropped."""
    kept = [*recent.split("\n"), signature] if recent else [signature]
    return "\n".join(kept[-(CYCLE_CALLS - 1):])


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """A remembered mutating call.

    Attributes:
        state: in_progress (claimed, running), completed (result stored) or unknown (timed
            out, or claimed and never finished within the claim's TTL: it may have
            happened).
        epoch: the task's change count when recorded: ``until_change`` records lapse when it
            moves on, at any other successful mutating call or a new turn (a write that
            repeats an earlier output, like restoring a backup, is not progress for the
            ladder, but the world may still have changed under the remembered call).
        created_at: clock time of the claim or completion, in seconds.
        content: the stored result (completed records).
        call_id: the call that produced it.
    """

    state: RecordState
    epoch: int
    created_at: float
    content: Any = None
    call_id: str = ""


class ApprovalState:
    """String constants of an approval record's state."""

    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    USED = "used"  # an approval its call has spent: the next identical call asks again


@dataclass(frozen=True, slots=True)
class ApprovalRecord:
    """A human decision about one idempotency key (``state`` an :class:`ApprovalState`).

    ``requested_at`` is the clock time of the first request in seconds (0 for a
    pre-approval); ``tool`` and ``args`` (in full, as the reviewer was shown them) describe
    the pending call; ``args_hash`` is the hash of exactly those argument values (no
    ``normalize``/``case``/``ignore`` options applied): an approval is good only for a call
    that would receive the same values. ``proof``: for an approval in a shared store, the
    HMAC of the decision under the approval secret (:mod:`toolguard.engine._approval_secret`):
    without a valid one the guard does not take the record for an approval."""

    state: str
    requested_at: float
    reason: str = ""
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    args_hash: str = ""
    proof: str = ""


class BeginRequest(NamedTuple):
    """What :meth:`Store.begin` needs for one call.

    Attributes:
        tool: tool name. signature: the canonical arguments hash.
        idempotency_key: the call's key, or "" when the call has no idempotency record
            (read-only tools, scope off).
        claim: claim ``idempotency_key`` (state in_progress) if no valid record exists.
        task_scope: records of this tool survive progress (scope ``task``).
        count: count this attempt (False when re-entering after waiting on another call; such
            a call also takes a completed record that an unrelated write has lapsed since:
            it was sent together with the call it waited on).
        poll: count it as a poll of the signature instead of a ladder attempt.
        now: clock time in seconds. claim_ttl_s: TTL of the in-progress claim in seconds.
        call_id: the call's id, kept in the claim: a later release only drops its own claim.
        ttl_s: TTL in seconds of the *unknown* record a claim becomes when ``claim_ttl_s``
            passes without a finish (the tool's idempotency TTL): the call was handed to its
            tool and never reported, so it may have happened, and an identical call gets the
            unknown-outcome treatment instead of running blind. 0 (the default, for a
            caller that keeps no outcome records): the expired claim simply lapses.
    """

    tool: str
    signature: str
    idempotency_key: str
    claim: bool
    task_scope: bool
    count: bool  # type: ignore[assignment]  # shadows tuple.count on purpose
    poll: bool
    now: float
    claim_ttl_s: float
    call_id: str = ""
    ttl_s: float = 0.0


class Snapshot(NamedTuple):
    """What the decision core reads, as of just after the attempt was counted.

    ``count`` is the repeat count of the signature (1 for a first call since the last
    progress); ``polls`` how often the signature was polled; ``record`` the valid
    idempotency record if any; ``claimed`` whether this call now holds the claim.

    The stagnation rule's state of the call's tool, since the last progress (as of before
    this call): ``stagnation`` is how many calls of the tool in a row, each with other
    arguments than the one before, had the outcome ``stagnation_outcome``; the last of
    them and the ones before it (up to ``CYCLE_CALLS - 1``, newline-separated) had
    ``stagnation_signature`` (0, "" and "" when there is no such run).

    ``transient`` is how many times in a row the signature's last executed calls failed
    with a transient error (a rate limit, a 5xx, a timeout), as of before this call.
    """

    halted: dict[str, Any] | None
    epoch: int
    calls: int
    tool_calls: int
    consecutive_failures: int
    tokens: int
    started_at: float
    count: int  # type: ignore[assignment]  # shadows tuple.count on purpose
    polls: int
    record: IdempotencyRecord | None
    approval: ApprovalRecord | None
    claimed: bool
    stagnation: int = 0
    stagnation_outcome: str = ""
    stagnation_signature: str = ""
    transient: int = 0


class RetryRequest(NamedTuple):
    """What :meth:`Store.retry_unknown` needs for the approved retry of a call whose outcome
    is unknown.

    Attributes:
        idempotency_key: the call's key. origin: the ``call_id`` of the unknown record the
            retry was decided on (``IdempotencyRecord.call_id``, as begin read it).
        call_id: the retry's own id, kept in its claim (as ``BeginRequest.call_id``).
        approval: the approval the retry spends, as it is stored once spent (state used).
        now, claim_ttl_s, ttl_s: as in :class:`BeginRequest`: the claim is held for
            ``claim_ttl_s`` seconds, then reads as an unknown outcome for ``ttl_s`` more.
    """

    idempotency_key: str
    origin: str
    call_id: str
    approval: ApprovalRecord
    now: float
    claim_ttl_s: float
    ttl_s: float


class FinishRequest(NamedTuple):
    """The outcome of one call, for :meth:`Store.finish`.

    Attributes:
        tool, signature, idempotency_key: as in :class:`BeginRequest`.
        executed: the tool ran. success: it returned (did not raise).
        unknown: it ended in a timeout whose real outcome is unknown.
        mutating: the call's effect is mutating (success may be progress).
        result_digest: digest of the result (progress detection), "" if not executed.
        store_result: keep a completed idempotency record holding ``content``.
        content: the result to remember. release: drop this call's claim without a record
            (only a claim with this ``call_id``: one that expired and was re-claimed by an
            identical call is that call's, and stays).
        ttl_s: TTL of the idempotency record in seconds. now: clock time in seconds.
        halt: set the task's halted flag to this description (or None).
        call_id: the call's id.
        outcome: the stagnation rule's digest of what the call returned (its normalised
            result, or its error), "" for a call the rule does not count (not executed, an
            unknown outcome, a poll). A run of the tool's calls grows when the outcome
            repeats under other arguments, and restarts at another outcome or at progress.
        max_progress_resets: after this many consecutive output changes of the signature
            with no other call in between, a change no longer restarts its count (0: no cap).
        transient: the call failed with a transient error: it does not count as a repeat
            (its attempt is taken back from the signature's count) but as a transient
            failure in a row (``Snapshot.transient``); any other executed outcome ends that
            streak.
        progress: a fingerprint of the result's explicit progress fields (percentages,
            ratios, counters, a status), "" when it has none. A changed output whose
            fingerprint the signature never had before in the task is progress without the
            ``max_progress_resets`` cap; any other change (a timestamp, an id, fields that
            oscillate between values they had before) is bounded by that cap.
    """

    tool: str
    signature: str
    idempotency_key: str
    executed: bool
    success: bool
    unknown: bool
    mutating: bool
    result_digest: str
    store_result: bool
    content: Any
    release: bool
    ttl_s: float
    now: float
    halt: dict[str, Any] | None = None
    call_id: str = ""
    outcome: str = ""
    max_progress_resets: int = 0
    transient: bool = False
    progress: str = ""


@dataclass(frozen=True, slots=True)
class TaskUsage:
    """Counters of one task: tool calls proposed, per tool, tokens, start time (seconds);
    the price of its model usage in nano-dollars (1e-9 USD), per tool, and the tokens whose
    price was unknown."""

    tool_calls: int
    per_tool: dict[str, int]
    input_tokens: int
    output_tokens: int
    started_at: float | None
    epoch: int
    halted: dict[str, Any] | None
    cost_nusd: int = 0
    cost_per_tool: dict[str, int] = field(default_factory=dict)
    unpriced_tokens: int = 0


@runtime_checkable
class Store(Protocol):
    """Per-task state, atomically. Implementations: :class:`~toolguard.stores.MemoryStore`,
    :class:`~toolguard.stores.SQLiteStore`, :class:`~toolguard.stores.RedisStore`. All times
    are seconds on the guard's clock.

    Every method may raise :class:`toolguard.StoreError` when the back-end fails.

    A store may set ``blocking = False`` when its operations never wait on I/O (the memory
    store): ``acall`` then calls it on the event loop. Any other store (``RedisStore``,
    ``SQLiteStore``, one without the attribute) is called from a worker thread under
    ``acall``.
    """

    def begin(self, task_id: str, req: BeginRequest) -> Snapshot:
        """Count the attempt, claim the key if asked, and return the state to decide on."""
        ...

    def finish(self, task_id: str, req: FinishRequest) -> None:
        """Record a call's outcome: progress, result history, idempotency record, halt."""
        ...

    def get_record(self, task_id: str, key: str, now: float) -> IdempotencyRecord | None:
        """The idempotency record under ``key`` if it has not expired."""
        ...

    def set_halted(self, task_id: str, halt: dict[str, Any] | None) -> None:
        """Set (or with None clear) the task's halted flag. Clearing it (``Task.resume``)
        restarts every tool's run of consecutive failures: a tool refused for its failures
        could otherwise never run again to end the streak."""
        ...

    def new_turn(self, task_id: str) -> None:
        """A new user turn: progress for every signature (the epoch moves on)."""
        ...

    def add_usage(self, task_id: str, input_tokens: int, output_tokens: int, now: float) -> int:
        """Add token usage; return the task's total tokens."""
        ...

    def add_cost(self, task_id: str, cost_nusd: int, unpriced_tokens: int, tool: str,
                 now: float) -> tuple[int, int]:
        """Add the price of model usage in nano-dollars and the tokens of unknown price,
        also to ``tool``'s cost unless ``tool`` is ``""``; return the task's total cost and
        the tool's (0 without a tool)."""
        ...

    def usage(self, task_id: str) -> TaskUsage:
        """The task's counters."""
        ...

    def set_approval(self, task_id: str, key: str, record: ApprovalRecord, ttl_s: float) -> None:
        """Store a human decision (or a pending request) for ``key``."""
        ...

    def retry_unknown(self, task_id: str, req: RetryRequest) -> bool:
        """Claim ``req.idempotency_key`` for the approved retry of the call whose outcome is
        unknown, atomically: if the key's record is still the unknown outcome of
        ``req.origin`` (a finished unknown record, or its claim past the claim's TTL), it
        becomes an in-progress claim held by ``req.call_id`` (expiring as a claim of
        :meth:`begin` does) and ``req.approval`` is stored under the key; return True.
        Otherwise (another retry claimed it first, or the record changed or expired) change
        nothing and return False: the caller decides again on fresh state.

        A store without this method cannot run such a retry: the guard treats the call as
        a store failure (``on_error``). A subclass of a toolguard store inherits it."""
        ...

    def pending_approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Pending approval requests of the task, by key."""
        ...

    def approvals(self, task_id: str) -> dict[str, ApprovalRecord]:
        """Every approval record of the task (pending, decided, used), by key."""
        ...

    def clear_task(self, task_id: str) -> None:
        """Delete every key of the task."""
        ...
