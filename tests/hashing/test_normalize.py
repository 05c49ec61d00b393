"""Result normalisation (``[tools.X.result]``): what of a result is compared with earlier
ones. The engine-level behaviour is in ``test_detection.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import toolguard as tg
from toolguard.hashing._normalize import (
    MAX_NORMALIZED_CHARS,
    default_normalizer,
    field_path_problem,
    normalizer_for,
    strip_volatile,
)
from toolguard.policy._model import ResultPolicy

DEFAULT_NORMALIZER = default_normalizer()

STRIPPED = [
    ("Ran 5 tests in 0.003s", "Ran 5 tests in <duration>"),
    ("===== 3 passed in 1.52s =====", "===== 3 passed in <duration> ====="),
    ("took 3 s", "took <duration>"), ("done in 12ms", "done in <duration>"),
    ("real\t0m1.234s", "real\t<duration>"), ("elapsed 40 seconds", "elapsed <duration>"),
    ("2024-05-01T12:00:01.123Z ok", "2024-05-01T<time> ok"),
    ("2024-05-01 12:00:01,456 INFO", "2024-05-01 <time> INFO"),
    ("at 2024-05-01T12:00:01+02:00", "at 2024-05-01T<time>"),
    ("Tue Dec  1 09:38:33 UTC 2026", "Tue Dec  <time>"), ("Jan 5 12:34:56 host", "Jan <time> host"),
    ('[05/Jan/2024:12:34:56 +0000] "GET /"', '[05/Jan/2024:<time>] "GET /"'),
    ("12:34:56.789 worker ready", "<time> worker ready"),
    ("id 3f2a1b4c-1234-5678-9abc-def012345678", "id <uuid>"),
    ("commit 9fceb02d0ae598e95dc970b74767f19372d61af8", "commit <hex>"),
    ("<Foo object at 0x7f3a2b1c>", "<Foo object at <hex>>"),
    ("server pid 4242 on port 8080", "server pid <pid> on port <port>"),
    ("PID=77 listening on localhost:5000", "PID=<pid> listening on localhost:<port>"),
    ("[1] 4242", "<pid>"), ("http://127.0.0.1:8000/", "http://127.0.0.1:<port>/"),
]
KEPT = ["flight HAT001 on 2024-05-15", "departs 06:00:00", "123456789012 rows", "main 5s",
        "v1.23s", "Found 0 results.", "cafe", "total: 5 items in 3 folders",
        "spid 44", "sport 8080"]


@pytest.mark.parametrize(("text", "expected"), STRIPPED)
def test_volatile_parts_are_stripped(text: str, expected: str) -> None:
    assert DEFAULT_NORMALIZER(text) == expected


@pytest.mark.parametrize("text", KEPT)
def test_data_is_kept(text: str) -> None:
    assert DEFAULT_NORMALIZER(text) == text


def test_two_runs_of_one_test_suite_normalise_alike() -> None:
    one = "platform linux -- Python 3.11.4\ncollected 12 items\n12 passed in 0.41s\n"
    two = "platform linux -- Python 3.11.4\ncollected 12 items\n12 passed in 0.39s\n"
    assert DEFAULT_NORMALIZER(one) == DEFAULT_NORMALIZER(two)
    assert DEFAULT_NORMALIZER(one) != DEFAULT_NORMALIZER(one.replace("12 passed", "1 failed"))


def test_a_timestamp_keeps_its_day() -> None:
    """The time of day is the clock; the date is data: two updatedAt values a day apart are
    different values, the same day at other times the same."""
    def at(when: str) -> Any:
        return DEFAULT_NORMALIZER({"id": "o1", "updatedAt": when})

    assert at("2024-05-01T12:00:01Z") == at("2024-05-01T18:30:00.5Z")
    assert at("2024-05-01T12:00:01Z") != at("2024-05-02T12:00:01Z")


def test_json_values_are_normalised_string_by_string_without_changing_the_input() -> None:
    value: dict[str, Any] = {"at": "2024-05-01T12:00:01Z", "n": [1, "took 2 s"], "ok": True}
    assert DEFAULT_NORMALIZER(value) == {"at": "2024-05-01T<time>",
                                         "n": [1, "took <duration>"], "ok": True}
    assert value["at"] == "2024-05-01T12:00:01Z"


@pytest.mark.parametrize(("path", "value", "expected"), [
    ("$.meta.request_id", {"meta": {"request_id": 1, "a": 2}}, {"meta": {"a": 2}}),
    ("$.items[*].etag", {"items": [{"etag": 1, "k": 1}, {"etag": 2}]},
     {"items": [{"k": 1}, {}]}),
    ("$..ts", {"ts": 1, "a": {"ts": 2, "b": [{"ts": 3, "c": 4}]}}, {"a": {"b": [{"c": 4}]}}),
    ("$['odd key']", {"odd key": 1, "k": 2}, {"k": 2}),
    ("$[0]", [1, 2, 3], [2, 3]), ("$.*", {"a": 1, "b": 2}, {}),
    ("$.missing.deeper", {"a": 1}, {"a": 1}), ("$.a.b", {"a": "text"}, {"a": "text"}),
])
def test_ignore_fields(path: str, value: Any, expected: Any) -> None:
    normalize = normalizer_for(ResultPolicy(ignore_fields=(path,), strip_volatile=False))
    assert normalize(value) == expected


def test_ignore_fields_apply_to_json_text_and_ignore_to_text() -> None:
    normalize = normalizer_for(ResultPolicy(ignore_fields=("$.id",), ignore=(r"seq=\d+",)))
    assert normalize('{"id": 7, "v": "seq=9 ok"}') == normalize('{"v":"seq=1 ok","id":8}')
    assert normalize("not json seq=3") == "not json "
    assert normalize('{"broken": ') == '{"broken": '


def test_strip_volatile_can_be_turned_off() -> None:
    assert normalizer_for(ResultPolicy(strip_volatile=False))("took 3 s") == "took 3 s"


def test_longer_results_are_compared_as_they_are() -> None:
    text = "took 1 s " + "x" * MAX_NORMALIZED_CHARS
    assert DEFAULT_NORMALIZER(text) is text


@pytest.mark.parametrize(("path", "why"), [
    ("meta.id", "must start with $"), ("$", "names no field"), ("$.", "a name is missing"),
    ("$[x]", "is not [N], [*] or ['name']"), ("$[0", "unclosed ["), ("$a", "unexpected 'a'"),
])
def test_bad_field_paths(path: str, why: str) -> None:
    problem = field_path_problem(path)
    assert problem is not None and why in problem


def test_the_policy_loader_locates_bad_result_settings(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[tools.get.result]\nignore = ["(unclosed"]\nignore_fields = ["meta.x"]\n')
    with pytest.raises(tg.PolicyError) as info:
        tg.load_policy(path, env={})
    found = {(p.path, p.line) for p in info.value.problems}
    assert found == {("tools.get.result.ignore[0]", 2), ("tools.get.result.ignore_fields[0]", 3)}
    assert "must start with $" in str(info.value)


@given(st.text(max_size=300))
def test_normalising_is_idempotent(text: str) -> None:
    once = DEFAULT_NORMALIZER(text)
    assert DEFAULT_NORMALIZER(once) == once


# -- the RE2 prefilters in front of the two volatile passes -------------------------------------
def _both_passes(text: str) -> str:
    from toolguard.hashing._normalize import _IDS, _VOLATILE, _volatile

    return _IDS.sub(_volatile, _VOLATILE.sub(_volatile, text))


_PIECES = st.sampled_from([
    "2024-01-05", "T", " ", "  ", "12:34", ":56", ".789", ",5", "Z", "+02:00", " UTC", "Jan",
    "Dec", "/", "05/Jan/2024:12:34:56 +0000", "took ", "in ", "within ", "after ", "elapsed ",
    "duration: ", "time: ", "ms", "us", "µs", "ns", "s", "sec", "seconds", "min", "m", "1",
    "42", "0.31", "٣", "\u00a0", "\u2009", "\x1c", "\x85", "\n", "\t", "[1]", "[", "]", "pid",
    "PID=", "Pid: ", "port ", "Port:", "localhost:", "127.0.0.1:", "0.0.0.0:", "[::1]:", "[::]:",
    "8080", "10",
    "0x", "dead", "BEEF", "cafe1234", "-", "abcdef012345", "0123456789ab", "x", ".", "_"])


@given(st.lists(_PIECES, max_size=40).map("".join))
@settings(max_examples=1500, deadline=None)
def test_the_prefilters_never_skip_a_pass_that_would_replace_something(text: str) -> None:
    """Each prefilter finds a substring of every match of its pass (Unicode digits and
    whitespace included), so skipping the pass when it finds none changes nothing."""
    from toolguard.hashing._normalize import _strip_volatile, strip_volatile

    assert _strip_volatile(text) == _both_passes(text)
    assert strip_volatile(text) == _both_passes(text)  # remembered (short) or not


@given(st.lists(st.one_of(_PIECES, st.text(max_size=40)), max_size=60).map("".join))
@settings(max_examples=500, deadline=None)
def test_a_remembered_text_strips_as_it_did_the_first_time(text: str) -> None:
    from toolguard.hashing._normalize import _strip_volatile, strip_volatile

    first = strip_volatile(text)
    assert strip_volatile(text) == first == _strip_volatile(text)
    assert strip_volatile((text + "x")[:-1]) == first  # an equal text, another object


def test_only_short_plain_texts_are_remembered_and_the_memo_is_bounded() -> None:
    from toolguard.hashing._normalize import (
        STRIP_MEMO_CHARS,
        STRIP_MEMO_ENTRIES,
        _strip_remembered,
        strip_volatile,
    )

    class Text(str):
        pass

    _strip_remembered.cache_clear()
    assert strip_volatile("took 5 ms") == strip_volatile("took 5 ms") == "took <duration>"
    assert _strip_remembered.cache_info().hits == 1
    assert strip_volatile("x" * (STRIP_MEMO_CHARS + 1) + " 5 ms").endswith("<duration>")
    assert strip_volatile(Text("took 5 ms")) == "took <duration>"
    assert _strip_remembered.cache_info().currsize == 1  # neither the long nor the subclass
    for i in range(STRIP_MEMO_ENTRIES + 10):
        strip_volatile(f"note {i}")
    assert _strip_remembered.cache_info().currsize == STRIP_MEMO_ENTRIES


def test_the_prefilters_agree_with_both_passes_on_every_recorded_text(shared: Path) -> None:
    """Every string in the shared recordings (results, arguments, metadata: ~5 MB)."""
    import json

    from toolguard.hashing._normalize import _prefilters, _strip_volatile, strip_volatile

    assert None not in _prefilters()  # RE2 is installed where the tests run
    texts: list[str] = []
    for path in sorted((shared / "data").rglob("*.json*")):
        for line in path.read_text(errors="replace").splitlines():
            try:
                stack = [json.loads(line)]
            except ValueError:
                continue
            while stack:
                item = stack.pop()
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, dict):
                    stack.extend(item.values())
                elif isinstance(item, list):
                    stack.extend(item)
    assert len(texts) > 10_000
    changed = [t for t in texts if _both_passes(t) != t]
    assert changed  # the data has volatile parts, so the check below means something
    assert [_strip_volatile(t) for t in texts] == [_both_passes(t) for t in texts]
    assert [strip_volatile(t) for t in texts] == [_both_passes(t) for t in texts]


@pytest.mark.parametrize(("text", "expected"), [
    ("pid 10.0.0.0:22", "pid <pid>.0.0.0:<port>"),  # a context word inside the match before
    ("took 5s, took 3s", "took <duration>, took <duration>"),
    ("run 3 of 17: 123456.25s", "run 3 of 17: <duration>"),  # the match starts digits back
    ("step 4: 98765 ms", "step 4: <duration>"), ("real 12m2.5s", "real <duration>"),
    ("x1.5s 2.5s", "x1.5s <duration>"), ("é 10 ms ü 0xdeadbeef", "é <duration> ü <hex>"),
])
def test_each_pass_searches_from_its_first_candidate_and_finds_every_match(
        text: str, expected: str) -> None:
    """A pass searches from its prefilter's first candidate (a match's first digit or its
    context word, numbers that are no match before it) and replaces what a scan from the
    start replaces, a match whose context word lies in the match before included."""
    from toolguard.hashing._normalize import _strip_volatile

    assert _both_passes(text) == expected
    assert _strip_volatile(text) == expected


@pytest.mark.parametrize("text", [
    "at 2024-01-05T12:34", "05/Jan/2024:12:34:56 +0000", "Jan  5 12:34:56", "Dec 31 23:59:59",
    "12:34:56.789", "5 ms", "3µs", "7ns", "2us", "0.5 s", "1.25sec", "1٣ms", "5\u00a0ms",
    "5\u2009ms", "5\x1cms", "5\x85ms", "done in 3s", "took 5 min", "after 2 seconds",
    "elapsed 4s", "duration: 3s", "time: 7s", "real 1m2.5s", "pid 123", "PID=42", "Pid: 7",
    "pid:9", "x\n[1] 1234\ny", "port 8080", "Port:443", "PORT=22", "port: 5432",
    "localhost:8000", "127.0.0.1:80", "0.0.0.0:22", "[::1]:99", "[::]:99",
    "id 123e4567-e89b-12d3-a456-426614174000", "at 0xdeadbeef", "sha abcdef012345",
    "SHA ABCDEF012345",
])
def test_each_kind_of_volatile_part_passes_its_prefilter(text: str) -> None:
    """One text per alternative of the two passes, each its text's only volatile part: a
    prefilter missing that alternative would leave it unreplaced."""
    from toolguard.hashing._normalize import _strip_volatile

    assert _both_passes(text) != text
    assert _strip_volatile(text) == _both_passes(text)


_PROGRESS_PIECES = st.sampled_from([
    "42", "%", " %", "3/10", " / ", "of", " of ", "step ", "Stage ", "PHASE ", "page", "part ",
    "batch ", "epoch ", "iteration ", "chunk ", "processed", "Completed", "done", "finished",
    "downloaded", "uploaded", "indexed", "copied", "transferred", "written", "remaining",
    "progress", "count", "counter", "status", "State", "=", ": ", "'", '"', "running", "٣",
    "\u017f", "\u212a", "\u0130", "\u0131", "x", " ", "\n", ".", "5.5", "_", "-"])


@given(st.lists(st.one_of(_PROGRESS_PIECES, st.text(max_size=8)), max_size=40).map("".join))
@settings(max_examples=800, deadline=None)
def test_the_progress_search_behind_its_lookahead_finds_what_the_plain_pattern_finds(
        text: str) -> None:
    """The lookahead only lets re skip positions where no alternative can start (Unicode
    digits and case folds included)."""
    import re

    from toolguard.hashing._progress_marks import _PROGRESS, _progress, progress_marks

    assert _progress()[0].findall(text) == re.findall(_PROGRESS, text)
    assert progress_marks(text) == progress_marks((text + "x")[:-1])  # remembered or not


_ASCII_SPACES = st.sampled_from(["\t", "\x0b", "\x0c", "\r", "\x1c", "\x1f"])


@given(st.lists(st.one_of(_PROGRESS_PIECES, _ASCII_SPACES,
                          st.text(st.characters(max_codepoint=127), max_size=8)),
                max_size=40).map("".join))
@settings(max_examples=800, deadline=None)
def test_on_ascii_text_the_progress_search_on_re2_finds_what_re_finds(text: str) -> None:
    """ASCII text from a few dozen characters on is searched by RE2: its spaces are spelled
    as Python's (``\\x0b``, ``\\x1c``), its word boundary, digits and words are ASCII's."""
    import re

    from toolguard.hashing._progress_marks import _PROGRESS, _progress

    text = text.encode("ascii", "ignore").decode()
    assert _progress()[1](text) == re.findall(_PROGRESS, text)


@given(st.lists(st.one_of(_PIECES, st.text(max_size=20)), max_size=40).map("".join))
@settings(max_examples=300, deadline=None)
def test_a_normaliser_remembers_a_text_as_it_normalised_it(text: str) -> None:
    fresh = normalizer_for(ResultPolicy(ignore=("[0-9]+ items",)))
    once = fresh(text)
    assert fresh(text) == once == fresh._normalized(text, strip_volatile)
    assert fresh((text + "x")[:-1]) == once  # an equal text, another object


def test_a_normaliser_remembers_short_plain_texts_only_and_a_bounded_number() -> None:
    from toolguard.hashing._normalize import TEXT_MEMO_CHARS, TEXT_MEMO_ENTRIES, ResultNormalizer

    class Text(str):
        pass

    normalizer = ResultNormalizer(True, None, (), ResultPolicy())
    assert normalizer("took 5 ms") == normalizer("took 5 ms") == "took <duration>"
    assert normalizer._memo == {"took 5 ms": "took <duration>"}
    assert normalizer("x" * TEXT_MEMO_CHARS + " 5 ms").endswith("<duration>")
    assert normalizer(Text("took 6 ms")) == "took <duration>"
    assert normalizer({"a": "took 7 ms"}) == {"a": "took <duration>"}
    assert len(normalizer._memo) == 1  # neither the long text, the subclass nor the dict
    for i in range(TEXT_MEMO_ENTRIES + 10):
        normalizer(f"note {i}")
    assert 0 < len(normalizer._memo) <= TEXT_MEMO_ENTRIES
    assert normalizer == ResultNormalizer(True, None, (), ResultPolicy())  # memo aside


def test_a_text_a_normaliser_remembers_is_not_remembered_by_the_strip_memo_too() -> None:
    """One memo per text: a short plain result in the normaliser's, the strings of a JSON
    result in ``strip_volatile``'s."""
    from toolguard.hashing._normalize import ResultNormalizer, _strip_remembered

    normalizer = ResultNormalizer(True, None, (), ResultPolicy())
    _strip_remembered.cache_clear()
    assert normalizer("took 8 ms") == "took <duration>"
    assert _strip_remembered.cache_info().currsize == 0
    assert normalizer({"a": "took 9 ms"}) == {"a": "took <duration>"}
    assert _strip_remembered.cache_info().currsize == 1
