"""The per-task memo of short text results' digests (``_record.digest_memo``) gives what
normalizing every result gives: the same digests and kinds, and so the same verdicts."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.engine import _record
from toolguard.hashing._normalize import ResultNormalizer, default_normalizer, normalizer_for
from toolguard.policy._model import LadderPolicy, ResultPolicy, ToolPolicy
from toolguard.testing import FakeClock

D = tg.Decision
# texts that normalize to the same form (volatile parts), to empty results, and plain ones
_TEXTS = st.sampled_from([
    "Done in 0.31s", "Done in 0.47s", "build failed at 2024-01-05T12:34:56Z",
    "build failed at 2024-01-05T12:35:01Z", "Found 0 results.", "", "  ", "none",
    "request 3f2a9c1e-0b1d-4c2e-9f00-123456789abc failed", "ok", "pid 4242 exited",
    "pid 4243 exited", "deadbeefcafe", "x" * (_record.MEMO_CHARS + 1),
])
_RESULTS = st.one_of(_TEXTS, st.text(max_size=40), st.none(), st.integers(),
                     st.lists(_TEXTS, max_size=3), st.dictionaries(st.text(max_size=3), _TEXTS,
                                                                    max_size=3))
_NORMALIZERS = [default_normalizer(), normalizer_for(ResultPolicy(strip_volatile=False)),
                normalizer_for(ResultPolicy(ignore=(r"\d+",)))]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(range(len(_NORMALIZERS))), _RESULTS), max_size=60))
def test_memoized_digests_equal_the_eager_ones(calls: list[tuple[int, Any]]) -> None:
    memo: dict[str, tuple[ResultNormalizer, str, str]] = {}
    for index, content in calls:
        normalizer = _NORMALIZERS[index]
        assert _record.digest_memo(memo, normalizer, content) == _record.digest_of(normalizer,
                                                                               content)
        assert len(memo) <= _record.MEMO_ENTRIES


def test_a_repeated_text_is_normalized_once(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    eager = _record.digest_of

    def counting(normalizer: ResultNormalizer, content: Any) -> tuple[str, str]:
        seen.append(content)
        return eager(normalizer, content)

    monkeypatch.setattr(_record, "digest_of", counting)
    memo: dict[str, tuple[ResultNormalizer, str, str]] = {}
    text, other = "Done in 0.31s", normalizer_for(ResultPolicy(strip_volatile=False))
    for _ in range(3):
        _record.digest_memo(memo, default_normalizer(), text)
    assert seen == [text]
    _record.digest_memo(memo, other, text)  # another tool's normalizer: computed again
    assert seen == [text, text]
    assert _record.digest_memo(memo, other, text) == eager(other, text)
    assert len(seen) == 2


_ids = itertools.count()
_POLICY = tg.Policy(
    ladder=LadderPolicy(stagnation_warn_at=3, stagnation_block_at=5),
    tools={"search": ToolPolicy(effect=tg.Effect.READONLY),
           "status": ToolPolicy(effect=tg.Effect.POLL)})


def _verdicts(calls: list[tuple[str, int, Any, bool]]) -> list[tuple[D, str | None]]:
    guard = tg.Guard(_POLICY, [], clock=FakeClock(), strict_tools=False)
    task = guard.task(f"memo-{next(_ids)}")
    out: list[tuple[D, str | None]] = []
    for tool, arg, result, is_error in calls:
        try:
            r = task._replay_call(tool, {"q": arg}, result, is_error=is_error)
        except tg.Halt:
            out.append((D.HALT, None))
            break
        out.append((r.decision, r.notice))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["search", "status"]), st.integers(0, 4), _RESULTS,
                          st.booleans()), max_size=25))
def test_verdicts_with_the_memo_equal_the_verdicts_without(
        calls: list[tuple[str, int, Any, bool]]) -> None:
    memoized = _verdicts(calls)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_record, "MEMO_CHARS", -1)  # every result normalized, as before
        eager = _verdicts(calls)
    assert memoized == eager
