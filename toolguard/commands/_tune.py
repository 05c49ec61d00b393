"""``toolguard tune``: fit a policy's thresholds to labelled runs.

Given recorded runs labelled success or failure (``toolguard.replay._labelled``), find the
tightest thresholds that stop none of the successful runs, estimate how often they would stop
a *new* successful run, and measure what they would have stopped in the failed ones:

1. **Observe.** Every run is replayed once through the base policy made permissive (no
   budgets, ladders out of reach, the stagnation rule reporting every run of two or more):
   for each run, the highest repeat count per effect and per tool, the longest stagnation
   run and the number of calls.
2. **Fit.** Per effect, ``block_at`` is one above the highest repeat count of any successful
   run (at least :data:`MIN_BLOCK_AT`), ``halt_at`` one above that, ``warn_at`` one below;
   per tool that :data:`MIN_TOOL_RUNS` successful runs call, a tighter ladder of its own when
   its data allow one. ``stagnation_block_at`` is two above the longest successful run (the
   rule blocks the call *after* a run that long), ``max_tool_calls`` the most calls of any
   successful run.
3. **Estimate.** Leave one out: each successful run is judged by the thresholds fitted on
   the others; the share it would stop, with a 95% upper bound (Wilson score interval), is
   how often a new successful run would be stopped.
4. **Check.** Every run is replayed through the fitted policy: the successful ones must not
   be stopped (a block, a halt, or a cached answer other than what the call returned), and
   the failed ones show what the policy would have saved (the calls after their first block
   or halt).

The output is a policy file (``extends`` the base policy when there is one) that
``toolguard check`` accepts, and a short report.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

if TYPE_CHECKING:  # pydantic and the replay readers load when the command runs, not at
    # every start of the CLI
    from toolguard.policy._model import Policy
    from toolguard.replay._labelled import Judged, LabelledRun

__all__ = ["Fit", "Observed", "TuneResult", "fit", "observe", "policy_text", "tune"]

MIN_BLOCK_AT: Final = 3
"""No ladder blocks before the third identical call: one retry of anything is normal."""
MIN_TOOL_RUNS: Final = 3
"""Successful runs that must call a tool before it gets thresholds of its own."""
MIN_STAGNATION_BLOCK_AT: Final = 4
_OUT_OF_REACH: Final = 1_000_000
_STAGNATION: Final = re.compile(r"stagnation: (\d+) different")
_LADDERED: Final = ("readonly", "mutating")


@dataclass(slots=True)
class Observed:
    """What one run did, under the permissive policy.

    Attributes:
        labelled: the run. calls: its calls. counts: the highest repeat count per effect
            (``readonly``, ``mutating``). tool_counts: the highest repeat count per tool.
        stagnation: the longest stagnation run (calls of one tool with other arguments and
            one outcome). tools: the tools it called.
    """

    labelled: LabelledRun
    calls: int
    counts: dict[str, int] = field(default_factory=dict)
    tool_counts: dict[str, int] = field(default_factory=dict)
    stagnation: int = 0

    @property
    def success(self) -> bool:
        """The run succeeded."""
        return self.labelled.label == "success"


@dataclass(frozen=True, slots=True)
class Fit:
    """Fitted thresholds.

    Attributes:
        ladders: per effect, ``(warn_at, block_at, halt_at)``.
        tools: per tool, its own ``(warn_at, block_at, halt_at)`` (only where tighter than its
            effects' ladders).
        stagnation_block_at: the stagnation rule's block rung.
        max_tool_calls: the budget of calls per task.
    """

    ladders: dict[str, tuple[int, int, int]]
    tools: dict[str, tuple[int, int, int]]
    stagnation_block_at: int
    max_tool_calls: int

    def stops(self, run: Observed) -> bool:
        """Whether these thresholds would stop ``run`` (as observed)."""
        if run.calls > self.max_tool_calls or run.stagnation + 2 > self.stagnation_block_at:
            return True
        if any(count >= self.ladders[effect][1] for effect, count in run.counts.items()
               if effect in self.ladders):
            return True
        return any(count >= self.tools[tool][1] for tool, count in run.tool_counts.items()
                   if tool in self.tools)


@dataclass(slots=True)
class TuneResult:
    """What :func:`tune` found.

    Attributes:
        fit: the thresholds. observed: every run as observed.
        loo_stopped / loo_runs: successful runs the leave-one-out fits would stop, of how many.
        judged: every run replayed through the fitted policy. problems: input problems.
    """

    fit: Fit
    observed: list[Observed]
    loo_stopped: int
    loo_runs: int
    judged: list[Judged]
    problems: list[str]

    @property
    def loo_upper(self) -> float:
        """The 95% upper bound of the leave-one-out stop rate (Wilson score interval)."""
        return wilson_upper(self.loo_stopped, self.loo_runs)

    def summary(self) -> dict[str, Any]:
        """The report's figures (JSON values)."""
        success = [j for j in self.judged if j.labelled.label == "success"]
        failure = [j for j in self.judged if j.labelled.label == "failure"]
        stopped = [j for j in failure if j.stopped_at is not None]
        return {
            "runs": len(self.judged), "successful": len(success), "failed": len(failure),
            "successful_stopped": sum(j.harmed for j in success),
            "loo_stopped": self.loo_stopped, "loo_runs": self.loo_runs,
            "loo_rate": self.loo_stopped / self.loo_runs if self.loo_runs else 0.0,
            "loo_upper_95": self.loo_upper,
            "failed_stopped": len(stopped),
            "calls_saved": sum(j.saved_calls for j in failure),
            "calls_failed": sum(j.report.calls for j in failure),
            "stopped": [{"run": j.report.id, "at": j.stopped_at, "calls": j.report.calls,
                         "why": j.reasons[0] if j.reasons else ""} for j in stopped],
        }


def wilson_upper(k: int, n: int, z: float = 1.96) -> float:
    """The upper end of the Wilson score interval for ``k`` successes in ``n`` trials."""
    if n == 0:
        return 1.0
    p = k / n
    centre = p + z * z / (2 * n)
    margin = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return min(1.0, (centre + margin) / (1 + z * z / n))


def permissive(policy: Policy) -> Policy:
    """``policy`` with nothing that stops a call: no budgets, ladders out of reach, the
    stagnation rule warning from a run of two (its reasons give the run lengths)."""
    from toolguard.policy._model import LadderThresholds

    far = LadderThresholds(warn_at=_OUT_OF_REACH, block_at=_OUT_OF_REACH,
                           halt_at=_OUT_OF_REACH)
    tools = {name: tp.model_copy(update={"ladder": None, "max_calls": None})
             for name, tp in policy.tools.items()}
    return policy.model_copy(update={
        "budget": policy.budget.model_copy(update={
            "max_tool_calls": None, "max_tokens": None, "timeout_s": None,
            "max_consecutive_failures": None}),
        "ladder": policy.ladder.model_copy(update={
            "readonly": far, "mutating": far, "stagnation_warn_at": 2,
            "stagnation_block_at": 0}),
        "tools": tools,
    })


def observe(judged: Iterable[Judged]) -> list[Observed]:
    """Each replayed run's maxima (see :class:`Observed`)."""
    out: list[Observed] = []
    for j in judged:
        seen = Observed(j.labelled, j.report.calls)
        for step in j.report.steps:
            effect = str(step.effect)
            if effect in _LADDERED and step.tool is not None:
                seen.counts[effect] = max(seen.counts.get(effect, 0), step.count)
                seen.tool_counts[step.tool] = max(seen.tool_counts.get(step.tool, 0),
                                                  step.count)
            found = _STAGNATION.match(step.reason)
            if found is not None:
                seen.stagnation = max(seen.stagnation, int(found.group(1)))
        out.append(seen)
    return out


def _ladder(highest: int) -> tuple[int, int, int]:
    block = max(MIN_BLOCK_AT, highest + 1)
    return max(2, block - 1), block, block + 1


def fit(observed: Sequence[Observed]) -> Fit:
    """The tightest thresholds that stop none of the successful runs of ``observed``."""
    success = [o for o in observed if o.success]
    ladders = {e: _ladder(max((o.counts.get(e, 0) for o in success), default=0))
               for e in _LADDERED}
    tools: dict[str, tuple[int, int, int]] = {}
    callers: dict[str, list[int]] = {}
    effects_of: dict[str, set[str]] = {}
    for o in success:
        for tool, count in o.tool_counts.items():
            callers.setdefault(tool, []).append(count)
    for o in observed:
        for tool in o.tool_counts:
            effects_of.setdefault(tool, set()).update(o.counts)
    loosest_effect = max(block for _, block, _ in ladders.values())
    for tool, counts in sorted(callers.items()):
        if len(counts) < MIN_TOOL_RUNS:
            continue
        own = _ladder(max(counts))
        if own[1] < loosest_effect:
            tools[tool] = own
    longest = max((o.stagnation for o in success), default=0)
    return Fit(ladders, tools, max(MIN_STAGNATION_BLOCK_AT, longest + 2),
               max((o.calls for o in success), default=1))


def leave_one_out(observed: Sequence[Observed]) -> tuple[int, int]:
    """``(stopped, runs)``: successful runs that the thresholds fitted without them stop."""
    success = [o for o in observed if o.success]
    stopped = 0
    for i, run in enumerate(success):
        others = [o for k, o in enumerate(success) if k != i]
        if fit(others).stops(run):
            stopped += 1
    return stopped, len(success)


def policy_text(result: Fit, base: Path | None, out: Path, note: str) -> str:
    """The fitted policy as TOML (``extends`` the base: a shipped policy by its name, a file
    by its path relative to ``out``)."""
    from toolguard.policy._shipped import is_policy_name

    lines = ["# A policy fitted by `toolguard tune`.", *(f"# {n}" for n in note.splitlines()),
             ""]
    if base is not None:
        named = is_policy_name(str(base)) and not base.is_file()
        reference = str(base) if named else os.path.relpath(base.resolve(),
                                                           out.resolve().parent)
        lines += [f"extends = {json.dumps(reference)}", ""]
    lines += ["[budget]", f"max_tool_calls = {result.max_tool_calls}", "",
              "[ladder]", f"stagnation_block_at = {result.stagnation_block_at}",
              f"stagnation_warn_at = {result.stagnation_block_at - 1}", ""]
    for effect, (warn, block, halt) in result.ladders.items():
        lines += [f"[ladder.{effect}]", f"warn_at = {warn}", f"block_at = {block}",
                  f"halt_at = {halt}", ""]
    for tool, (warn, block, halt) in result.tools.items():
        lines += [f"[tools.{json.dumps(tool)}]",
                  f"ladder = {{ warn_at = {warn}, block_at = {block}, halt_at = {halt} }}", ""]
    return "\n".join(lines)


def tune(labelled: Sequence[LabelledRun], base: Policy,
         fitted_policy: Callable[[Fit], Policy]) -> TuneResult:
    """Observe, fit, estimate and check (the module docstring).

    Args:
        labelled: the runs. base: the policy whose thresholds are fitted (its effects and
            classification are kept). fitted_policy: the policy a fit gives (the written
            file, loaded back), replayed in the check.
    """
    from toolguard.replay._labelled import RunCache, judge

    cache: RunCache = {}
    loose = permissive(base)
    judged, problems = judge(labelled, lambda _: loose, cache=cache)
    observed = observe(judged)
    result = fit(observed)
    stopped, runs = leave_one_out(observed)
    checked_policy = fitted_policy(result)
    checked, more = judge(labelled, lambda _: checked_policy, cache=cache)
    return TuneResult(result, observed, stopped, runs, checked,
                      [str(p) for p in (*problems, *more)])


# -- the command -------------------------------------------------------------------------------
def register(app: Any) -> None:
    """Add the ``tune`` command to ``app`` (a :class:`typer.Typer`)."""
    app.command("tune")(tune_command)


def tune_command(
    index: Annotated[
        Path | None,
        typer.Argument(help="An index of labelled runs: JSON lines with file (relative to "
                            "the index), run (the id replay gives it) and label (success or "
                            "failure).", dir_okay=False, show_default=False),
    ] = None,
    select: Annotated[
        list[str] | None,
        typer.Option("--select", metavar="FIELD=VALUE",
                     help="Only the index lines whose FIELD has this VALUE (repeatable), "
                          "e.g. policy=airline.toml."),
    ] = None,
    success: Annotated[
        list[str] | None,
        typer.Option("--success", help="Files of successful runs (a glob; repeatable), "
                                       "instead of an index."),
    ] = None,
    failure: Annotated[
        list[str] | None,
        typer.Option("--failure", help="Files of failed runs (a glob; repeatable)."),
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option("--policy", help="The base policy (a file, or the name of a shipped "
                                      "policy): its effects and classification are kept, its "
                                      "thresholds fitted (default: built-ins).",
                     dir_okay=False),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Write the fitted policy to this file.",
                     dir_okay=False),
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="Report format: table or json.")
    ] = "table",
) -> None:
    """Fit a policy's thresholds to labelled runs: the tightest that stop no successful run.

    Writes the fitted policy (it extends --policy) and reports a leave-one-out estimate of
    how often it would stop a new successful run, and what it stops in the failed runs."""
    from toolguard._errors import PolicyError
    from toolguard.policy._loader import load_policy
    from toolguard.policy._model import Policy
    from toolguard.replay._labelled import labelled_from_globs, read_index
    from toolguard.replay._model import ReplayInputError

    from ._common import fail

    if out is None:
        fail("give --out FILE: where to write the fitted policy")
    if output_format not in ("table", "json"):
        fail(f"--format must be table or json, not {output_format!r}")
    if (index is None) == (not success):
        fail("give an index of labelled runs, or --success GLOB (and --failure GLOB), "
             "not both")
    chosen: dict[str, str] = {}
    for item in select or []:
        name, sep, value = item.partition("=")
        if not sep or not name:
            fail(f"--select takes FIELD=VALUE, got {item!r}")
        chosen[name] = value
    try:
        labelled = (read_index(index, chosen) if index is not None
                    else labelled_from_globs(success or [], failure or []))
        base = load_policy(policy, env={}) if policy is not None else Policy()
    except ReplayInputError as exc:
        fail(str(exc))
    except PolicyError as exc:
        fail(f"invalid --policy: {exc}")
    if not any(item.label == "success" for item in labelled):
        fail("no successful run to fit on")

    def written(result: Fit, note: str = "") -> Policy:
        out.write_text(policy_text(result, policy, out, note), encoding="utf-8")
        return load_policy(out, env={})

    try:
        result = tune(labelled, base, written)
    except OSError as exc:
        fail(f"cannot write {out}: {exc.strerror or exc}")
    figures = result.summary()
    written(result.fit, _note(figures))
    if output_format == "json":
        typer.echo(json.dumps({"policy": str(out), **figures, "problems": result.problems},
                              indent=2))
    else:
        typer.echo(_report(result, figures, out))
    for problem in result.problems:
        typer.echo(f"problem: {problem}", err=True)
    if result.problems:
        raise typer.Exit(2)
    if figures["successful_stopped"]:
        raise typer.Exit(1)


def _note(f: dict[str, Any]) -> str:
    return (f"Fitted on {f['runs']} runs ({f['successful']} successful, {f['failed']} failed): "
            f"stops {f['successful_stopped']} successful run(s);\nleave-one-out: "
            f"{f['loo_stopped']} of {f['loo_runs']} successful runs stopped (95% upper bound "
            f"{f['loo_upper_95']:.1%});\nstops {f['failed_stopped']} failed run(s), "
            f"{f['calls_saved']} of their {f['calls_failed']} calls after the stop.")


def _report(result: TuneResult, f: dict[str, Any], out: Path) -> str:
    lines = [f"wrote {out}", ""]
    rows = [(effect, *ladder) for effect, ladder in result.fit.ladders.items()]
    rows += [(f"tool {tool}", *ladder) for tool, ladder in result.fit.tools.items()]
    lines.append(f"{'ladder':<32} {'warn_at':>7} {'block_at':>8} {'halt_at':>7}")
    lines += [f"{name:<32} {w:>7} {b:>8} {h:>7}" for name, w, b, h in rows]
    lines += [f"stagnation_block_at {result.fit.stagnation_block_at}, "
              f"max_tool_calls {result.fit.max_tool_calls}", "", *_note(f).splitlines()]
    for stop in f["stopped"]:
        lines.append(f"  {stop['run']}: stopped at call {stop['at']} of {stop['calls']} "
                     f"({stop['why']})")
    return "\n".join(lines)
