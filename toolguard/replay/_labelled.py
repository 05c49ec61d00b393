"""Labelled runs: recorded runs whose outcome is known (the task succeeded or failed), and
what a policy would have done to them.

A set of labelled runs comes from an index (JSON lines, one run per line: ``file`` relative to
the index, ``run`` the id replay gives it, ``label`` ``success`` or ``failure``, optionally
``policy``, the policy file that matches the run, and ``calls_native``, the number of calls the
harness ran), as ``../shared/data/realruns/index.jsonl`` is, or from file globs (every run of a
file takes the file's label). :func:`judge` replays them and sorts the outcome into

* **harm**: a successful run that the guard would have blocked or halted, or answered from its
  cache with something other than what the call really returned;
* **value**: a failed run that the guard would have stopped: the first block or halt and the
  calls the run made after it.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from toolguard._types import Decision
from toolguard.policy._model import Policy

from ._formats import read_runs
from ._model import ReplayInputError, Run
from ._runner import RunReport, replay_runs

__all__ = ["Judged", "LabelledRun", "judge", "labelled_from_globs", "read_index"]

Label = Literal["success", "failure"]
LABELS: Final = ("success", "failure")


@dataclass(frozen=True, slots=True)
class LabelledRun:
    """One recorded run and its outcome.

    Attributes:
        file: the recording. run: the id replay gives the run, or ``None``: every run of the
            file. label: ``success`` or ``failure``. policy: the policy file that matches the
            run (an index's ``policy``, resolved against the policy folder), or ``None``.
        calls_native: the calls the harness ran, when the index says.
    """

    file: Path
    run: str | None
    label: Label
    policy: str | None = None
    calls_native: int | None = None


def read_index(path: Path, select: Mapping[str, str] | None = None) -> list[LabelledRun]:
    """The runs an index names (see the module docstring); with ``select``, only the lines
    whose fields have those values (compared as text: ``{"policy": "airline.toml"}``).

    Raises:
        ReplayInputError: the index cannot be read, or a line lacks ``file`` or a ``label`` of
            ``success`` / ``failure``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ReplayInputError(str(path), None, f"cannot read: {exc.strerror or exc}"
                               ) from None
    runs: list[LabelledRun] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ReplayInputError(str(path), number, f"not valid JSON: {exc.msg}") from None
        if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
            raise ReplayInputError(str(path), number, "expected an object with a 'file'")
        if select and any(str(entry.get(k)) != v for k, v in select.items()):
            continue
        label = entry.get("label")
        if label not in LABELS:
            raise ReplayInputError(str(path), number,
                                   f"'label' must be success or failure, not {label!r}")
        run, policy, calls = entry.get("run"), entry.get("policy"), entry.get("calls_native")
        runs.append(LabelledRun(
            path.parent / entry["file"], None if run is None else str(run), label,
            policy if isinstance(policy, str) else None,
            calls if isinstance(calls, int) and not isinstance(calls, bool) else None))
    if not runs:
        raise ReplayInputError(str(path), None, "the index names no run"
                               + (" with those --select values" if select else ""))
    return runs


def labelled_from_globs(success: Sequence[str], failure: Sequence[str] = ()) -> list[LabelledRun]:
    """Every run of the files the ``success`` globs match, labelled success, and of the
    ``failure`` globs, labelled failure (a file both match is a failure).

    Raises:
        ReplayInputError: a glob matches no file.
    """
    labels: dict[Path, Label] = {}
    for label, patterns in (("success", success), ("failure", failure)):
        for pattern in patterns:
            found = sorted(glob.glob(pattern, recursive=True))  # noqa: PTH207 - a user's glob, absolute or relative
            if not found:
                raise ReplayInputError(pattern, None, "matches no file")
            for name in found:
                labels[Path(name)] = label  # type: ignore[assignment]
    return [LabelledRun(path, None, label) for path, label in labels.items()]


@dataclass(slots=True)
class Judged:
    """What one policy would have done to one labelled run.

    Attributes:
        labelled: the run. report: the replay of it (``None`` when it could not be read).
        stopped_at: the index of the first block or halt, or ``None``.
        stale: the index of the first cached answer that differs from what the call really
            returned, or ``None``.
    """

    labelled: LabelledRun
    report: RunReport
    stopped_at: int | None = None
    stale: int | None = None
    reasons: list[str] = field(default_factory=list)

    @property
    def harmed(self) -> bool:
        """A successful run that the guard stopped or fed an outdated cached result."""
        return self.labelled.label == "success" and (self.stopped_at is not None
                                                      or self.stale is not None)

    @property
    def saved_calls(self) -> int:
        """A failed run's calls after the first block or halt (0 when nothing stopped it)."""
        if self.labelled.label != "failure" or self.stopped_at is None:
            return 0
        return self.report.calls - self.stopped_at - 1


def _judged(labelled: LabelledRun, report: RunReport) -> Judged:
    judged = Judged(labelled, report)
    for step in report.steps:
        if step.decision in (Decision.BLOCK, Decision.HALT):
            if judged.stopped_at is None:
                judged.stopped_at = step.index
            judged.reasons.append(f"{step.index}: {step.decision} {step.tool}: {step.reason}")
        elif step.stale:
            if judged.stale is None:
                judged.stale = step.index
            judged.reasons.append(f"{step.index}: cached {step.tool}, not what it returned")
    return judged


RunCache = dict[Path, tuple[list[Run], list[ReplayInputError]]]


def judge(labelled: Iterable[LabelledRun], policy_for: Callable[[LabelledRun], Policy],
          *, cache: RunCache | None = None) -> tuple[list[Judged], list[ReplayInputError]]:
    """Replay each labelled run through its policy (``policy_for``) and judge the outcome.

    Args:
        labelled: the runs.
        policy_for: the policy to replay a run with (runs with equal policies replay
            together, file by file).
        cache: files already read, kept between calls (tuning replays the same runs many
            times).

    Returns:
        One :class:`Judged` per run found, in input order, and the problems met (a file that
        cannot be read, a run the file does not hold).
    """
    store: RunCache = {} if cache is None else cache
    problems: list[ReplayInputError] = []
    out: list[Judged] = []
    for item in labelled:
        if item.file not in store:
            store[item.file] = read_runs([item.file])
        runs, read_problems = store[item.file]
        if read_problems and item.run is None:
            problems.extend(read_problems)
        chosen = [r for r in runs if item.run is None or r.id == item.run]
        if not chosen:
            problems.append(ReplayInputError(str(item.file), None,
                                             f"no run {item.run!r} in this file"))
            continue
        report = replay_runs(chosen, policy_for(item))
        problems.extend(report.problems)
        out.extend(_judged(item, run_report) for run_report in report.runs)
    return out, problems


def policy_files(labelled: Iterable[LabelledRun], folder: Path) -> Mapping[str | None, Any]:
    """The distinct ``policy`` names of ``labelled``, each resolved in ``folder``."""
    return {item.policy: None if item.policy is None else folder / item.policy
            for item in labelled}
