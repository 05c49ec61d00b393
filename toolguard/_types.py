"""Enums shared by every layer: what a tool does, what the guard decided, what is remembered."""

from __future__ import annotations

import enum

__all__ = ["Decision", "Effect", "IdempotencyScope", "Mode", "RecordState"]


class _StrEnum(str, enum.Enum):
    """A ``str`` enum whose ``str()`` is its value (``enum.StrEnum`` needs Python 3.11)."""

    def __str__(self) -> str:
        return str(self.value)


class Effect(_StrEnum):
    """What a tool call does to the world.

    ``readonly`` calls observe (grep, view_file); repeats are often harmless, so their ladder
    is more tolerant. ``mutating`` calls change something (write_file, a payment); identical
    repeats are dangerous, so their ladder is stricter and completed calls are remembered for
    idempotency. ``poll`` calls wait on something that moves (read a process's output); they
    are exempt from the ladder and limited by ``max_polls`` per signature instead.
    (DESIGN.md §1 for the first two.)
    """

    READONLY = "readonly"
    MUTATING = "mutating"
    POLL = "poll"


class Decision(_StrEnum):
    """What the guard did with one tool call.

    ==========  ========  ===========================================================
    decision    executed  meaning
    ==========  ========  ===========================================================
    allow       yes       first or normal call
    warn        yes       a repeat: executed, with a corrective notice appended
    cached      no        a completed mutating call repeated: the stored result is
                          returned with a notice that the action already happened
    block       no        a repeat past ``block_at``, a rejected approval, or a
                          refused tool: a synthetic error result
    review      no        needs a human approval (or the outcome of an identical
                          earlier call is unknown); listed in ``pending_approvals``
    invalid     no        the arguments failed JSON parsing or the argument schema
    halt        no        the turn ends: raised as :class:`toolguard.Halt`
    ==========  ========  ===========================================================
    """

    ALLOW = "allow"
    WARN = "warn"
    CACHED = "cached"
    BLOCK = "block"
    REVIEW = "review"
    INVALID = "invalid"
    HALT = "halt"

    @property
    def executed(self) -> bool:
        """True exactly for the decisions that run the tool (``allow`` and ``warn``)."""
        return self is Decision.ALLOW or self is Decision.WARN


class IdempotencyScope(_StrEnum):
    """How long a completed mutating call is remembered (within ``idempotency.ttl_s``).

    ``until_change``: until the next progress in the task (another write that changed the
    world, or a new user turn), so re-running a script after an edit works. ``task``: once per
    task whatever happens in between. ``off``: never remembered.
    """

    UNTIL_CHANGE = "until_change"
    TASK = "task"
    OFF = "off"


class Mode(_StrEnum):
    """``enforce`` acts on decisions; ``observe`` computes and audits them but always executes
    (shadow mode); ``off`` passes every call straight through."""

    ENFORCE = "enforce"
    OBSERVE = "observe"
    OFF = "off"


class RecordState(_StrEnum):
    """State of an idempotency record (after AWS Powertools' idempotency record states)."""

    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    UNKNOWN = "unknown"  # the call timed out: it may or may not have happened


# The members again as plain module constants, for the code that runs on every call: on
# Python 3.11 reading ``Decision.ALLOW`` costs ~70 ns (EnumType's ``__getattr__`` hook slows
# every class attribute read; Python 3.12 removed it), a module global ~10 ns, and one guarded
# call reads about twenty. Same objects: ``ALLOW is Decision.ALLOW``.
READONLY, MUTATING, POLL = Effect.READONLY, Effect.MUTATING, Effect.POLL
ALLOW, WARN, CACHED, BLOCK = Decision.ALLOW, Decision.WARN, Decision.CACHED, Decision.BLOCK
REVIEW, INVALID, HALT = Decision.REVIEW, Decision.INVALID, Decision.HALT
SCOPE_TASK, SCOPE_OFF = IdempotencyScope.TASK, IdempotencyScope.OFF
ENFORCE, MODE_OFF = Mode.ENFORCE, Mode.OFF
IN_PROGRESS, COMPLETED, UNKNOWN = (RecordState.IN_PROGRESS, RecordState.COMPLETED,
                                   RecordState.UNKNOWN)
