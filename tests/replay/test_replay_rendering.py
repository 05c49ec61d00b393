"""A run rendered where it was replayed (``RunRenderer``: a worker of ``replay --jobs`` sends
back its part of the report, not its steps) writes the same bytes as the run's report written
in this process, for any id, tool name, reason and metadata, including the values orjson
refuses (a lone surrogate, an integer beyond 64 bits) and an id that changes after the run was
rendered (ids by position and ids made unique are settled in file order)."""

from __future__ import annotations

import json
import pickle
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from toolguard._types import Decision, Effect
from toolguard.replay._records import RunCounts, RunReport, Totals, new_step
from toolguard.replay._report import (
    JsonDocument,
    RunRenderer,
    TableRows,
    run_lines,
    to_json,
)

# text with the characters a recording may hold: controls, non-ASCII, lone surrogates
_TEXT = st.text(st.characters(exclude_categories=["Cn"]), max_size=12)
_META_VALUE = st.one_of(st.none(), st.booleans(), _TEXT,
                        st.integers(min_value=-(2**80), max_value=2**80))


@st.composite
def _runs(draw: st.DrawFn) -> RunReport:
    run = RunReport(draw(_TEXT), draw(_TEXT), draw(st.dictionaries(_TEXT, _META_VALUE,
                                                                     max_size=3)),
                    calls=draw(st.integers(0, 6)), format="trace")
    for index in range(draw(st.integers(0, 5))):
        decision = draw(st.sampled_from(list(Decision)))
        run.steps.append(new_step(index, draw(st.one_of(st.none(), _TEXT)), "h" * 32,
                                  draw(st.sampled_from([None, *Effect])), decision,
                                  draw(_TEXT), draw(st.integers(1, 5))))
    run.replayed = len(run.steps)
    run.halted_at = draw(st.one_of(st.none(), st.integers(0, 5)))
    run.halt_reason = None if run.halted_at is None else draw(_TEXT)
    run.error = draw(st.one_of(st.none(), _TEXT))
    run.tokens = draw(st.integers(0, 10**6))
    return run


def _document_of_report(run: RunReport) -> str:
    """The run's object as the JSON document writes a run given as its report, by the
    serializer the document uses for it: orjson, the standard library where orjson refuses
    a value."""
    value = _report_value(run)
    try:
        return orjson.dumps({"runs": [value]}, option=orjson.OPT_INDENT_2,
                            default=str).decode()[len('{\n  "runs": [\n    '):-len("\n  ]\n}")]
    except TypeError:
        return json.dumps(value, indent=2, default=str).replace("\n", "\n    ")


def _report_value(run: RunReport) -> dict[str, Any]:
    from toolguard.replay._runner import ReplayReport

    value: dict[str, Any] = to_json(ReplayReport([run]))["runs"][0]
    return value


def _line_of_report(run_id: str, step: dict[str, Any]) -> str:
    """A JSONL line as written of a step given as its report: its object with the ``"run"``
    key first, compact, by orjson, by the standard library where orjson refuses a value."""
    value = {"run": run_id, **step}
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return json.dumps(value, default=str, separators=(",", ":"))


def _written(run_id: str, run: RunReport, output: str) -> Any:
    """What the output writes of ``run`` rendered (and pickled, as a worker sends it back)
    and then named ``run_id``."""
    rendered = pickle.loads(pickle.dumps(RunRenderer(output, verbose=True)(run)))
    rendered.id = run_id
    if output == "json":
        parts: list[str] = []
        JsonDocument(parts.append).add_part(rendered.id, rendered.part)
        return parts[0][len('{\n  "runs": [\n    '):]
    if output == "jsonl":
        from toolguard.replay._report import lines_text

        return lines_text(rendered.id, rendered.part)
    rows = TableRows(verbose=True)
    rows.add_part(rendered.id, rendered.part)
    return rows.rows, rows.steps


@settings(max_examples=300, deadline=None)
@given(_runs(), st.one_of(st.none(), _TEXT))
def test_a_rendered_run_writes_what_its_report_writes(run: RunReport,
                                                      renamed: str | None) -> None:
    if renamed is not None:  # settled after the run was rendered
        written = {output: _written(renamed, run, output) for output in ("json", "jsonl",
                                                                           "table")}
        run.id = renamed
    else:
        written = {output: _written(run.id, run, output) for output in ("json", "jsonl",
                                                                         "table")}
    assert written["json"] == _document_of_report(run)
    assert written["jsonl"] == "".join(f"{line}\n" for line in run_lines(run))
    assert written["jsonl"] == "".join(f"{_line_of_report(run.id, step.to_dict())}\n"
                                       for step in run.steps)
    rows = TableRows(verbose=True)
    rows.add(run)
    assert repr(written["table"]) == repr((rows.rows, rows.steps))


@settings(max_examples=200, deadline=None)
@given(st.lists(_runs(), max_size=4))
def test_totals_of_rendered_runs_are_the_totals_of_the_reports(runs: list[RunReport]) -> None:
    from_reports, from_counts = Totals(), Totals()
    for run in runs:
        from_reports.add(run)
        from_counts.add(pickle.loads(pickle.dumps(RunRenderer("json")(run))).counts)
    assert from_counts == from_reports
    assert from_counts.as_dict(0) == from_reports.as_dict(0)


def test_counts_are_what_the_report_says() -> None:
    run = RunReport("r", "f", {}, calls=4, replayed=3, tokens=7)
    run.steps += [new_step(0, "a", "h", Effect.READONLY, Decision.ALLOW, "", 1),
                  new_step(1, "a", "h", Effect.READONLY, Decision.WARN, "again", 2),
                  new_step(2, None, "", None, Decision.HALT, "tokens", 1)]
    run.halted_at = 2
    counts = RunCounts.of(run)
    assert (counts.calls, counts.replayed, counts.executed, counts.halted) == (4, 3, 2, True)
    assert dict(counts.decisions) == {"allow": 1, "warn": 1, "halt": 1}
    assert counts.tools == frozenset({"a"})
    totals = Totals()
    totals.add(counts)
    assert totals.decisions["halt"] == 1 and totals.runs_with["halt"] == 1
