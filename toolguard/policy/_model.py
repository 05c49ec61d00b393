"""The policy model: frozen pydantic models that the engine reads.

Files are loaded by :func:`toolguard.load_policy` (TOML → JSON Schema → semantic checks →
these models); see ``policy/_loader.py``. Every field here has a key of the same name in the
TOML language, and the shipped JSON Schema (``toolguard/policy.schema.json``) is the single
source for what a file may contain. Counts are calls; durations are seconds (``_s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from toolguard._outcomes import DEFAULT_TIMEOUT_EXCEPTIONS
from toolguard._types import Effect, IdempotencyScope, Mode
from toolguard.hashing._redact import key_patterns

if TYPE_CHECKING:  # re2 loads with the first rule that is matched
    from toolguard.hashing._regex import PolicyRegex

__all__ = [
    "ApprovalPolicy",
    "ArgOptions",
    "AuditPolicy",
    "BudgetPolicy",
    "IdempotencyPolicy",
    "LadderOverride",
    "LadderPolicy",
    "LadderThresholds",
    "Policy",
    "ResultPolicy",
    "StorePolicy",
    "ToolPolicy",
    "ToolRule",
]


# Key names whose values are secrets (after detect-secrets' KeywordDetector denylist); each
# plain word also matches folded, so "api_key" covers apiKey, X-Api-Key and API-KEY.
DEFAULT_REDACT: tuple[str, ...] = (
    "password", "passwd", "pwd", "passphrase", "secret", "token", "api_key", "access_key",
    "private_key", "priv_key", "auth_key", "client_key", "service_key", "account_key",
    "db_key", "database_key", "db_pass", "database_pass", "key_pass", "authorization", "cookie",
    "credential", "session_id", "contrasena", "contraseña", "passwort", "mot_de_passe", "creds",
    "pin_code", "otp_code", "totp", "mfa_code", "basic_auth", "auth_header",
)


MAX_COUNT: Final = 2**63 - 1
"""The largest count, threshold or size a policy may set (what a 64-bit counter holds)."""
MAX_SECONDS: Final = 1e9
"""The longest duration a policy may set (about 31 years): beyond it, timers and socket
timeouts overflow (``OverflowError``)."""
MAX_USD: Final = 1e9
"""The largest dollar budget a policy may set: a task's cost is counted in nano-dollars in a
64-bit counter (``toolguard.engine._cost``), which holds about 9.2e9 dollars."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LadderThresholds(_Frozen):
    """Repeat counts at which a call is warned, blocked and halted (1 = first call).

    DESIGN.md §1: a call is allowed below ``warn_at``, executed with a notice from ``warn_at``,
    not executed from ``block_at`` and the task halts at ``halt_at``. ``warn_at ≤ block_at ≤
    halt_at``; equal values skip a rung.
    """

    warn_at: int = Field(ge=2, le=MAX_COUNT)
    block_at: int = Field(ge=2, le=MAX_COUNT)
    halt_at: int = Field(ge=2, le=MAX_COUNT)


class LadderOverride(_Frozen):
    """A per-tool ladder: any subset of the thresholds; the rest come from the tool's effect
    (``warn_at``, ``block_at``, ``halt_at``) or from ``[ladder]`` (``stagnation_warn_at``,
    ``stagnation_block_at``; ``0`` turns the rung off for this tool, e.g. a ``think`` tool
    that returns nothing whatever it is given)."""

    warn_at: int | None = Field(default=None, ge=2, le=MAX_COUNT)
    block_at: int | None = Field(default=None, ge=2, le=MAX_COUNT)
    halt_at: int | None = Field(default=None, ge=2, le=MAX_COUNT)
    stagnation_warn_at: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    stagnation_block_at: int | None = Field(default=None, ge=0, le=MAX_COUNT)
    transient_retries: int | None = Field(default=None, ge=0, le=MAX_COUNT)


class LadderPolicy(_Frozen):
    """``[ladder]``: thresholds per effect (read-only is more tolerant: DESIGN.md §1).

    Attributes:
        reset_on_user_turn: a new user turn is progress for every signature.
        readonly, mutating: the repeat ladder of identical calls, per effect.
        stagnation_warn_at, stagnation_block_at: the stagnation rule (``0`` turns a rung
            off). Calls of one tool with *different* arguments that keep getting the same
            normalised result, or the same error, since the last progress form a run; the
            call that makes the run ``stagnation_warn_at`` long is executed with a notice,
            and once the run is ``stagnation_block_at - 1`` long the tool's next call is
            not executed (blocked) until progress.
        max_progress_resets: a signature whose result changes on every call, called
            back to back with no other call in between, stops counting as progress after
            this many consecutive resets: its repeats then climb the ladder (``0``: no cap;
            poll calls are limited by ``max_polls`` instead). A result whose explicit
            progress fields (percentages, ratios, counters, "step k of n", a status) moved to
            values the signature never had is progress without this cap.
        transient_retries: identical retries of a call whose last attempts failed with a
            transient error (HTTP 429 or 5xx, a timeout, "temporarily unavailable", a
            ``retryable`` flag, the tool's ``result.transient`` patterns): each runs with a
            notice to wait or back off, and none counts as a repeat; once the call has
            failed transiently this many times in a row, the next retry is blocked. ``0``:
            a transient failure is a failure like any other (its retries climb the ladder).
    """

    reset_on_user_turn: bool = True
    readonly: LadderThresholds = LadderThresholds(warn_at=3, block_at=4, halt_at=5)
    mutating: LadderThresholds = LadderThresholds(warn_at=2, block_at=3, halt_at=4)
    stagnation_warn_at: int = Field(default=4, ge=0, le=MAX_COUNT)
    stagnation_block_at: int = Field(default=6, ge=0, le=MAX_COUNT)
    max_progress_resets: int = Field(default=10, ge=0, le=MAX_COUNT)
    transient_retries: int = Field(default=3, ge=0, le=MAX_COUNT)


class BudgetPolicy(_Frozen):
    """``[budget]``: hard quotas per task (DESIGN.md §2, layer 1). ``None`` means no limit."""

    max_tool_calls: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    timeout_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    max_consecutive_failures: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    max_cost_usd: float | None = Field(default=None, gt=0, le=MAX_USD)
    unknown_cost: Literal["halt", "ignore"] = "halt"


class IdempotencyPolicy(_Frozen):
    """``[idempotency]``: the cache of completed mutating calls (DESIGN.md §2, layer 2).

    Attributes:
        ttl_s: how long a completed call is remembered, in seconds.
        max_entries: bound on remembered calls per store (in-memory LRU eviction beyond it).
        timeout_exceptions: exception class names (``__name__``, ``module.qualname``, or
            ``Name:STATUS`` for an RPC status) whose raising, or a subclass's, means the
            outcome is unknown: an identical retry goes to ``review``. The default names the
            timeouts of the standard library, requests, httpx, urllib3, aiohttp and gRPC,
            matched by class hierarchy without importing them (``toolguard._outcomes``); a
            list you set replaces it.
        wait_timeout_s: how long an identical concurrent call waits for the first one before
            raising :class:`toolguard.CallInProgress`, in seconds.
        in_progress_ttl_s: how long the claim of a running call is honoured, in seconds.
            A call not finished by then (a worker that crashed mid-call, a begun call never
            reported) is an unknown outcome from then on, kept for the tool's
            ``idempotency_ttl_s``: an identical mutating call goes to review (or continues
            the execution, for a tool that forwards its idempotency key), never runs
            blind. Set it above your longest tool run (a claim that expires under a running
            call sends its identical calls to review).
    """

    ttl_s: float = Field(default=3600.0, gt=0, le=MAX_SECONDS)
    max_entries: int = Field(default=10_000, ge=1, le=MAX_COUNT)
    timeout_exceptions: tuple[str, ...] = DEFAULT_TIMEOUT_EXCEPTIONS
    wait_timeout_s: float = Field(default=30.0, gt=0, le=MAX_SECONDS)
    in_progress_ttl_s: float = Field(default=600.0, gt=0, le=MAX_SECONDS)


class ApprovalPolicy(_Frozen):
    """``[approval]``: a pending approval older than ``timeout_s`` seconds fails the task."""

    timeout_s: float = Field(default=300.0, gt=0, le=MAX_SECONDS)


class AuditPolicy(_Frozen):
    """``[audit]``: argument keys matching any ``redact`` pattern (case-insensitive substring
    or regex search, in the key as written and folded: ``api_key`` also matches ``apiKey``
    and ``X-Api-Key``) are replaced by ``"[REDACTED]"`` before they reach a sink, a log, a
    notice or an exception; credentials of a well-known shape inside string values (Bearer
    headers, ``sk-…``, ``AKIA…``, ``ghp_…``, JWTs, PEM keys) are replaced too; string
    values longer than ``max_value_chars`` characters are truncated (``toolguard.hashing._redact``).
    The approver sees the full arguments."""

    redact: tuple[str, ...] = DEFAULT_REDACT
    max_value_chars: int = Field(default=200, ge=8, le=MAX_COUNT)

    @cached_property
    def redact_pattern(self) -> PolicyRegex | None:
        """All ``redact`` patterns, compiled once case-insensitively for RE2 (linear time in
        the key: a key name is the model's text), a plain word also folded (``api_key`` →
        ``apikey``, see :func:`toolguard.hashing._redact.key_patterns`); None if empty.

        Raises:
            ValueError: a pattern RE2 cannot run (the policy loader reports it first).
        """
        if not self.redact:
            return None
        from toolguard.hashing._regex import compile_patterns

        return compile_patterns(key_patterns(self.redact), ignore_case=True)


class StorePolicy(_Frozen):
    """``[store]``: where per-task state lives.

    Attributes:
        backend: ``memory`` (per process, the default), ``sqlite`` (a file shared by the
            processes of one machine) or ``redis`` (shared by workers anywhere). A URL alone
            chooses by its scheme.
        url: the Redis URL, e.g. ``redis://127.0.0.1:6379/0``; with ``cluster``, one or
            several comma-separated startup nodes (``redis://10.0.0.1:7000,10.0.0.2:7000``);
            or the SQLite file, ``sqlite:///relative/path.db`` or
            ``sqlite:////absolute/path.db`` (``backend = "sqlite"`` without a URL: the
            per-user state file, :func:`toolguard.stores.sqlite.default_path`).
        cluster: the Redis URL points at a Redis Cluster (redis-py ``RedisCluster``).
        on_error: ``fail_closed`` blocks the call when the store fails; ``fail_open`` runs it
            unguarded with a warning audit event.
        timeout_s: timeout of every store operation, in seconds (SQLite: how long an
            operation waits for another process's lock).
        key_prefix: namespace of every Redis key (``{key_prefix}:{task}:...``).
        state_ttl_s: TTL of per-task state (ladder counts, budgets, flags), in seconds.
    """

    backend: Literal["memory", "sqlite", "redis"] = "memory"
    url: str | None = None
    cluster: bool = False
    on_error: Literal["fail_closed", "fail_open"] = "fail_closed"
    timeout_s: float = Field(default=1.0, gt=0, le=MAX_SECONDS)
    key_prefix: str = "toolguard"
    state_ttl_s: float = Field(default=86_400.0, gt=0, le=MAX_SECONDS)


class ArgOptions(_Frozen):
    """``[tools.X.args.NAME]``: how one top-level argument enters the signature.

    ``ignore`` drops it (volatile fields: a model-invented request id); ``normalize = "path"``
    folds ``\\`` to ``/``, ``./``, ``//`` and a trailing ``/``; ``normalize = "whitespace"``
    collapses runs of white space and strips the ends; ``case = "insensitive"`` casefolds.
    """

    ignore: bool = False
    normalize: Literal["path", "whitespace"] | None = None
    case: Literal["sensitive", "insensitive"] = "sensitive"


class ToolRule(_Frozen):
    """``[[tools.X.rules]]``: if every regex in ``match`` is found (a search, as
    ``re.search``) in the string form of the named argument, the call gets ``effect``. First
    match wins. The patterns run on RE2, in time linear in the argument
    (``toolguard.hashing._regex``: no backreferences or lookaround)."""

    match: dict[str, str]
    effect: Effect

    @cached_property
    def compiled(self) -> tuple[tuple[str, PolicyRegex], ...]:
        """``match`` with each pattern compiled once (``pattern.search(text) -> bool``).

        Raises:
            ValueError: a pattern RE2 cannot run (the policy loader reports it first).
        """
        from toolguard.hashing._regex import compile_pattern

        return tuple((arg, compile_pattern(pattern)) for arg, pattern in self.match.items())


class ResultPolicy(_Frozen):
    """``[tools.X.result]``: how a result is normalised before it is compared with earlier
    ones (progress and stagnation); the model always gets the raw result.

    Attributes:
        strip_volatile: strip the built-in volatile parts (timestamps, durations, UUIDs,
            long hex ids, PIDs and ports in known phrasings; see ``toolguard.hashing._normalize``).
        ignore: regexes (``^``/``$`` match at line breaks) whose matches are removed from
            text results (and from every string inside a JSON result); run on RE2, in
            linear time (``toolguard.hashing._regex``).
        ignore_fields: JSONPath-style paths (``$.meta.request_id``, ``$.items[*].etag``,
            ``$..timestamp``) removed from JSON results, and from text results that parse
            as JSON.
        transient: regexes (RE2, as ``ignore``) that mark an error of this tool as
            transient, besides the built-in ones (``toolguard._outcomes.is_transient``).
    """

    strip_volatile: bool = True
    ignore: tuple[str, ...] = ()
    ignore_fields: tuple[str, ...] = ()
    transient: tuple[str, ...] = ()


class ToolPolicy(_Frozen):
    """``[tools.NAME]``: settings for one tool; unset fields inherit (see ``explain``).

    ``shell`` names the argument that holds a shell command line: each call is then
    classified by parsing it (``toolguard.shell._classifier``): read-only, mutating, poll, or, when
    the command is not recognised, the tool's ``effect``. ``rules`` still come first.
    """

    effect: Effect | None = None
    requires_approval: bool | None = None
    idempotency_scope: IdempotencyScope | None = None
    idempotency_ttl_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    forwards_idempotency_key: bool | None = None
    external: bool | None = None
    inline: bool | None = None
    max_calls: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    max_cost_usd: float | None = Field(default=None, gt=0, le=MAX_USD)
    max_polls: int | None = Field(default=None, ge=1, le=MAX_COUNT)
    ladder: LadderOverride | None = None
    args: dict[str, ArgOptions] = Field(default_factory=dict)
    rules: tuple[ToolRule, ...] = ()
    result: ResultPolicy | None = None
    shell: str | None = None


class Policy(_Frozen):
    """A whole policy. ``Policy()`` is the built-in defaults.

    Attributes:
        mode: enforce | observe | off.
        default_effect: effect of a tool nothing else classifies (no decorator, no policy
            entry); ``"deny"`` refuses such tools (decision ``block``).
        strict_tools: when a :class:`toolguard.Guard` is built, tools named in ``tools`` but
            not registered are an error.
        require_task: a ``@tg.*`` function the guard has registered, called outside any
            task (``with guard.task(...)``), raises ``ToolGuardError`` instead of running
            unguarded: for frameworks that register the raw function themselves
            (pydantic-ai ``tool_plain``, an MCP server's ``@server.tool()``).
        default_max_polls: ``max_polls`` of a poll call whose tool sets none.
        max_args_bytes: arguments larger than this many bytes (as JSON) are ``invalid`` and
            not kept (``None``: no limit); see ``toolguard.engine._limits``.
        sources: files this policy was loaded from, most general first (informational).
    """

    mode: Mode = Mode.ENFORCE
    default_effect: Effect | Literal["deny"] = Effect.MUTATING
    strict_tools: bool = True
    require_task: bool = False
    default_max_polls: int = Field(default=50, ge=1, le=MAX_COUNT)
    max_args_bytes: int | None = Field(default=1_000_000, ge=64, le=MAX_COUNT)
    budget: BudgetPolicy = BudgetPolicy()
    ladder: LadderPolicy = LadderPolicy()
    idempotency: IdempotencyPolicy = IdempotencyPolicy()
    approval: ApprovalPolicy = ApprovalPolicy()
    audit: AuditPolicy = AuditPolicy()
    store: StorePolicy = StorePolicy()
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)
    sources: tuple[str, ...] = ()

    # key path ("budget.max_tool_calls") -> where its value came from ("policies/prod.toml",
    # "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS"); a path that is absent has its built-in default.
    _provenance: dict[str, str] = PrivateAttr(default_factory=dict)

    def source_of(self, path: str) -> str:
        """Where the value at dotted ``path`` came from: a file, ``env VAR`` or ``built-in``.

        A leaf (``budget.max_tool_calls``) answers exactly. A table (``ladder.mutating``,
        ``tools.bash``) answers with the source applied last to it or to any key beneath it. A
        path inside a value set whole (``tools.bash.rules[0]`` of an array) answers with the
        source of that value.
        """
        found = "built-in"
        for key, source in self._provenance.items():  # in the order the values were applied
            if key == path or key.startswith((f"{path}.", f"{path}[")):
                found = source
        if found == "built-in":
            for key, source in self._provenance.items():
                if path.startswith((f"{key}.", f"{key}[")):
                    return source
        return found

    def with_provenance(self, provenance: Mapping[str, str]) -> Policy:
        """Attach where each key came from (used by the loader; returns ``self``).

        ``provenance`` maps a key path to its source, in the order the values were applied
        (most general layer first), so that a table reports the source applied last.
        """
        self._provenance = dict(provenance)
        return self
