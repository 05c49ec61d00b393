"""Resolve one tool's effective settings from its decorator spec and the policy.

Precedence, lowest first (tested in ``tests/policy/test_precedence.py``): built-in defaults <
decorator arguments < policy file (its ``[tools.X]`` beats its global sections) < environment
variables. Environment variables are already merged into the :class:`Policy` by the loader, so
here a value set in the policy (file or env) beats the decorator, which beats built-ins.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from toolguard._errors import PolicyError, PolicyProblem
from toolguard._types import Effect, IdempotencyScope
from toolguard.hashing._normalize import ResultNormalizer, default_normalizer, normalizer_for
from toolguard.policy._ladder_order import override_order_problems

from ._decorators import NOT_GIVEN, ToolSpec

if TYPE_CHECKING:  # pydantic loads with the first Policy, not with ``import toolguard``
    from toolguard.policy._model import ArgOptions, LadderThresholds, Policy, ToolPolicy, ToolRule

__all__ = ["ToolSettings", "resolve_tool", "spell_env_tools"]



@dataclass(frozen=True, slots=True)
class ToolSettings:
    """Effective settings of one tool (counts are calls, durations seconds).

    ``effect`` is the tool's base effect; ``rules`` may give a single call another one.
    ``deny`` is true when nothing classifies the tool and the policy's ``default_effect`` is
    ``"deny"``; a call that matches one of its ``rules`` is still classified (and allowed).
    ``shell`` names the argument whose command line classifies each call
    (``toolguard.shell._classifier``); ``result`` normalises results before they are compared;
    ``stagnation_warn_at``, ``stagnation_block_at``, ``max_progress_resets`` and
    ``transient_retries`` are the policy's ``[ladder]`` values (``0``: off; the first two
    and the last may be the tool's own). ``sources`` maps each field name to where its
    value came from.
    """

    name: str
    effect: Effect
    deny: bool
    requires_approval: bool
    idempotency_scope: IdempotencyScope
    idempotency_ttl_s: float
    forwards_idempotency_key: bool
    external: bool
    inline: bool
    max_calls: int | None
    max_polls: int
    readonly_ladder: LadderThresholds
    mutating_ladder: LadderThresholds
    args: dict[str, ArgOptions] = field(default_factory=dict)
    rules: tuple[ToolRule, ...] = ()
    shell: str | None = None
    result: ResultNormalizer = field(default_factory=default_normalizer)
    stagnation_warn_at: int = 0
    stagnation_block_at: int = 0
    max_progress_resets: int = 0
    transient_retries: int = 0
    sources: dict[str, str] = field(default_factory=dict)
    # (warn_at, block_at, halt_at) of each ladder as plain ints, which the decision reads on
    # every call: a field of a pydantic model costs ~5x a tuple item to read
    readonly_at: tuple[int, int, int] = field(init=False, repr=False, compare=False)
    mutating_at: tuple[int, int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name, ladder in (("readonly_at", self.readonly_ladder),
                             ("mutating_at", self.mutating_ladder)):
            object.__setattr__(self, name, (ladder.warn_at, ladder.block_at, ladder.halt_at))

    def ladder_for(self, effect: Effect) -> LadderThresholds:
        """The thresholds that apply to a call of ``effect`` (poll calls have none)."""
        return self.readonly_ladder if effect is Effect.READONLY else self.mutating_ladder


@functools.cache
def _no_tool_policy() -> ToolPolicy:
    from toolguard.policy._model import ToolPolicy

    return ToolPolicy()


def _by_default(policy: Policy) -> str:
    """The source of an effect nothing classified: the policy's ``default_effect`` and where
    that was set (``default_effect = "deny" (policies/prod.toml)``)."""
    return f'default_effect = "{policy.default_effect}" ({policy.source_of("default_effect")})'


def resolve_tool(policy: Policy, spec: ToolSpec) -> ToolSettings:
    """Compute a tool's effective settings and where each came from.

    Args:
        policy: the loaded policy (environment overrides already merged).
        spec: the tool's decorator spec (:func:`toolguard.spec_of` for plain functions).

    Returns:
        The frozen :class:`ToolSettings`.
    """
    tp = policy.tools.get(spec.name) or _no_tool_policy()
    src: dict[str, str] = {}
    tool_key = f"tools.{spec.name}"

    def from_tool(key: str) -> str:
        return policy.source_of(f"{tool_key}.{key}")

    def layered(key: str, default: Any) -> Any:
        """The tool's policy table, else the decorator, else ``default``; notes the source."""
        own, given = getattr(tp, key), getattr(spec, key)
        if own is not None:
            src[key] = from_tool(key)
            return own
        if given is not NOT_GIVEN:
            src[key] = "decorator"
            return given
        src[key] = "built-in"
        return default

    deny = False
    effect: Effect
    if tp.effect is not None:
        effect, src["effect"] = tp.effect, from_tool("effect")
    elif spec.effect is not NOT_GIVEN:
        effect, src["effect"] = spec.effect, "decorator"
    elif tp.requires_approval:  # gated by a human: classified, as @requires_approval is
        effect, src["effect"] = Effect.MUTATING, from_tool("requires_approval")
    elif policy.default_effect == "deny":
        effect, deny, src["effect"] = Effect.MUTATING, True, _by_default(policy)
    else:
        effect, src["effect"] = Effect(policy.default_effect), _by_default(policy)

    if tp.requires_approval is not None:
        approval, src["requires_approval"] = tp.requires_approval, from_tool("requires_approval")
    elif spec.requires_approval:
        approval, src["requires_approval"] = True, "decorator"
    else:
        approval, src["requires_approval"] = False, "built-in"

    external: bool = layered("external", False)
    inline: bool = layered("inline", False)

    scope: IdempotencyScope
    if tp.idempotency_scope is not None:
        scope, src["idempotency_scope"] = tp.idempotency_scope, from_tool("idempotency_scope")
    elif spec.idempotency_scope is not NOT_GIVEN:  # a scope named anywhere beats `external`
        scope, src["idempotency_scope"] = spec.idempotency_scope, "decorator"
    elif external:
        # the outside world: a later, unrelated write does not undo a payment or an email
        scope, src["idempotency_scope"] = IdempotencyScope.TASK, f"external ({src['external']})"
    else:
        scope = IdempotencyScope.TASK if approval else IdempotencyScope.UNTIL_CHANGE
        src["idempotency_scope"] = "built-in"

    global_ttl_src = policy.source_of("idempotency.ttl_s")
    ttl: float
    if tp.idempotency_ttl_s is not None:
        ttl, src["idempotency_ttl_s"] = tp.idempotency_ttl_s, from_tool("idempotency_ttl_s")
    elif global_ttl_src != "built-in" or spec.idempotency_ttl_s is NOT_GIVEN:
        ttl, src["idempotency_ttl_s"] = policy.idempotency.ttl_s, global_ttl_src
    else:
        ttl, src["idempotency_ttl_s"] = float(spec.idempotency_ttl_s), "decorator"

    forwards: bool = layered("forwards_idempotency_key", False)
    max_calls: int | None = layered("max_calls", None)

    if tp.max_polls is not None:
        max_polls, src["max_polls"] = tp.max_polls, from_tool("max_polls")
    else:
        max_polls = policy.default_max_polls
        src["max_polls"] = policy.source_of("default_max_polls")

    ladders: dict[Literal["readonly", "mutating"], LadderThresholds] = {}
    for kind in ("readonly", "mutating"):
        base: LadderThresholds = getattr(policy.ladder, kind)
        over = tp.ladder
        given = (over.model_fields_set & type(base).model_fields.keys()
                 if over is not None else set())
        if over is not None and given:
            base = base.model_copy(update={k: getattr(over, k) for k in given})
        # each threshold from where it was set: the tool's table, else the global ladder
        src[f"{kind}_ladder"] = _joined_sources({
            k: from_tool(f"ladder.{k}") if k in given else policy.source_of(f"ladder.{kind}.{k}")
            for k in type(base).model_fields})
        ladders[kind] = base

    _check_ladders(tp, effect, ladders, from_tool, tool_key)
    src["args"] = from_tool("args")
    src["rules"] = from_tool("rules")
    src["shell"] = from_tool("shell")
    src["result"] = from_tool("result")
    stagnation: dict[str, int] = {}
    for key in ("stagnation_warn_at", "stagnation_block_at", "transient_retries"):
        own = getattr(tp.ladder, key) if tp.ladder is not None else None
        if own is not None:
            stagnation[key], src[key] = own, from_tool(f"ladder.{key}")
        else:
            stagnation[key] = getattr(policy.ladder, key)
            src[key] = policy.source_of(f"ladder.{key}")
    src["max_progress_resets"] = policy.source_of("ladder.max_progress_resets")
    return ToolSettings(
        name=spec.name,
        effect=effect,
        deny=deny,
        requires_approval=approval,
        idempotency_scope=scope,
        idempotency_ttl_s=ttl,
        forwards_idempotency_key=forwards,
        external=external,
        inline=inline,
        max_calls=max_calls,
        max_polls=max_polls,
        readonly_ladder=ladders["readonly"],
        mutating_ladder=ladders["mutating"],
        args=dict(tp.args),
        rules=tp.rules,
        shell=tp.shell,
        result=default_normalizer() if tp.result is None else normalizer_for(tp.result),
        stagnation_warn_at=stagnation["stagnation_warn_at"],
        stagnation_block_at=stagnation["stagnation_block_at"],
        max_progress_resets=policy.ladder.max_progress_resets,
        transient_retries=stagnation["transient_retries"],
        sources=src,
    )


def _joined_sources(sources: Mapping[str, str]) -> str:
    """One source when every key has it, else each source after its keys, sources in the
    order their first key comes: ``"warn_at, block_at: base.toml; halt_at: child.toml"``."""
    by_source: dict[str, list[str]] = {}
    for key, source in sources.items():
        by_source.setdefault(source, []).append(key)
    if len(by_source) == 1:
        return next(iter(by_source))
    return "; ".join(f"{', '.join(keys)}: {source}" for source, keys in by_source.items())


def _check_ladders(tp: ToolPolicy, effect: Effect,
                   ladders: dict[Literal["readonly", "mutating"], LadderThresholds],
                   from_tool: Callable[[str], str], tool_key: str) -> None:
    """``warn_at ≤ block_at ≤ halt_at`` for the ladders a tool's calls really use: its
    effect (now known, the decorator's included) and its rules' effects. The policy loader
    checks what the policy alone decides; this covers an effect left to the decorator.

    Raises:
        PolicyError: a threshold the tool's own ladder sets is out of order.
    """
    if tp.ladder is None or not tp.ladder.model_fields_set:
        return
    given = {key: getattr(tp.ladder, key) for key in tp.ladder.model_fields_set
             if key in type(tp.ladder).model_fields}
    effects = {effect, *(rule.effect for rule in tp.rules)}
    problems: list[PolicyProblem] = []
    for kind in ("readonly", "mutating"):
        if Effect(kind) not in effects:
            continue
        values = ladders[kind].model_dump()  # the effect's ladder with the override on top
        for key, message in override_order_problems(given, values, kind):
            problems.append(PolicyProblem(from_tool(f"ladder.{key}"), f"{tool_key}.ladder.{key}",
                                          f"{message}: {tool_key.split('.', 1)[1]} is {kind}"))
    if problems:
        raise PolicyError(problems)


def spell_env_tools(policy: Policy, names: Iterable[str]) -> Policy:
    """Spell each ``tools.<name>`` set only by environment variables as the registered
    tool (of ``names``) it equals case-insensitively: variable names carry no case
    (``TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS`` → ``sendEmail``). The loader already does
    this for tools named in the policy file; this covers tools registered only in code.

    Raises:
        PolicyError: such a name matches several registered tools.
    """
    by_lower: dict[str, list[str]] = {}
    for registered in names:
        by_lower.setdefault(registered.lower(), []).append(registered)
    renames: dict[str, str] = {}
    problems: list[PolicyProblem] = []
    for name in policy.tools:
        source = policy.source_of(f"tools.{name}")
        if not source.startswith("env "):
            continue
        same = by_lower.get(name.lower(), [])
        if len(same) > 1:
            problems.append(PolicyProblem(
                source, f"tools.{name}",
                f"matches the registered tools {', '.join(map(repr, sorted(same)))}: "
                "environment variable names carry no case, so set this tool in a policy "
                "file"))
        elif same and same[0] != name and same[0] not in policy.tools:
            renames[name] = same[0]
    if problems:
        raise PolicyError(problems)
    if not renames:
        return policy
    tools = {renames.get(name, name): tp for name, tp in policy.tools.items()}
    provenance = {}
    for key, source in policy._provenance.items():
        parts = key.split(".", 2)
        if len(parts) >= 2 and parts[0] == "tools" and parts[1] in renames:
            provenance[".".join(["tools", renames[parts[1]], *parts[2:]])] = source
        else:
            provenance[key] = source
    return policy.model_copy(update={"tools": tools}).with_provenance(provenance)
