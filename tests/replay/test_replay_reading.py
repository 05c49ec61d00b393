"""The fast reading paths give what the plain ones gave: ``Source.json_lines`` (orjson alone on
lines without a run of 19 digits, found once per block) against ``load_json`` line by line,
and the detectors' shared head parse against a fresh parse per detector."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolguard.hashing._json_text import load_json
from toolguard.replay._model import Source
from toolguard.replay._reading import _head_objects, head_objects
from toolguard.replay._registry import readers


def _oracle(data: bytes) -> tuple[list[tuple[int, Any]], list[tuple[int, str]]]:
    """What json_lines yields and reports, by ``load_json`` on each line (the code before)."""
    values: list[tuple[int, Any]] = []
    bad: dict[str, list[tuple[int, str]]] = {}
    for number, raw in enumerate(io.BytesIO(data), 1):  # as a file handle splits lines
        if not raw.strip():
            continue
        try:
            value = load_json(raw)
        except json.JSONDecodeError as exc:
            bad.setdefault("json", []).append(
                (number, f"not valid JSON: {exc.msg} (column {exc.colno})"))
            continue
        except RecursionError:
            bad.setdefault("nested", []).append((number, "nested"))
            continue
        if isinstance(value, dict):
            values.append((number, value))
        else:
            bad.setdefault(type(value).__name__, []).append((number, "not an object"))
    return values, [lines[0] for lines in bad.values()]


_PIECES = st.sampled_from([
    b'{"tool": "bash", "args": {"command": "ls"}}', b'{"n": 12345678901234567890}',
    b'{"n": 1234567890123456789}', b'{"s": "1234567890123456789012"}', b'{"n": 123}',
    b"\xef\xbb\xbf{\"bom\": 1}", b'{"s": "\\ud800"}', b'{"bad": \xff}', b"[1, 2]", b"",
    b"   ", b"{", b'{"f": 1e999}', b'{"x": NaN}', b'"text"', b'{"u": "\xc3\xa9"}',
    b'{"deep": ' + b"[" * 300 + b"]" * 300 + b"}", b"\t\r",
])


@settings(max_examples=150, deadline=None)
@given(st.lists(_PIECES, max_size=30), st.sampled_from([b"\n", b"\r\n"]),
       st.sampled_from([1 << 20, 64]))
def test_json_lines_equals_load_json_line_by_line(tmp_path_factory: Any, pieces: list[bytes],
                                                  newline: bytes, block: int) -> None:
    import toolguard.replay._reading as reading

    data = newline.join(pieces)
    path = Path(tmp_path_factory.mktemp("lines")) / "f.jsonl"
    path.write_bytes(data)
    expected, first_bad = _oracle(data)
    saved = reading._BLOCK_BYTES
    reading._BLOCK_BYTES = block  # small blocks: runs and lines across block ends
    try:
        source = Source(path, "trace")
        got = list(source.json_lines())
    finally:
        reading._BLOCK_BYTES = saved
    assert got == expected
    assert [p.line for p in source.problems] == sorted(line for line, _ in first_bad)
    for problem, (_line, message) in zip(sorted(source.problems, key=lambda p: p.line or 0),
                                        sorted(first_bad), strict=True):
        if message.startswith("not valid JSON"):
            assert problem.message.startswith(message)


def test_a_long_run_in_one_line_leaves_the_others_to_orjson(tmp_path: Path) -> None:
    # an integer beyond 64 bits stays exact; its neighbours in the same block are unaffected
    path = tmp_path / "f.jsonl"
    path.write_bytes(b'{"a": 1}\n{"n": 123456789012345678901234}\n{"b": 2.0}\n')
    got = list(Source(path, "trace").json_lines())
    assert got == [(1, {"a": 1}), (2, {"n": 123456789012345678901234}), (3, {"b": 2.0})]
    assert type(got[1][1]["n"]) is int


def test_the_head_is_parsed_once_and_answers_every_limit() -> None:
    head = b'{"a": 1}\nnot json\n{"b": 2}\n[3]\n' + b'{"c": 3}\n' * 30
    assert head_objects(head, limit=1) == _head_objects(head, 1)
    assert head_objects(head) == _head_objects(head, 20)
    assert head_objects(head, limit=25) == _head_objects(head, 25)
    assert head_objects(head, limit=1) == [{"a": 1}]
    other = b'{"z": 0}\n'
    assert head_objects(other) == [{"z": 0}]  # another head is parsed afresh


def test_detection_is_unchanged_by_the_shared_head(tmp_path: Path) -> None:
    # each reader's verdict on a head, alone (a fresh parse) and after the others (shared)
    heads = [b'{"run": "r"}\n{"tool": "bash", "args": {}}\n',
             b'{"type": "session_meta", "payload": {}}\n',
             b'{"type": "user", "sessionId": "s", "message": {}}\n',
             b'{"resourceSpans": []}\n', b"plain text\n"]
    path = tmp_path / "x.jsonl"
    for head in heads:
        alone = []
        for reader in readers():
            fresh = bytes(bytearray(head))  # another object: no shared parse
            alone.append(reader.detect(path, fresh))
        shared = [reader.detect(path, head) for reader in readers()]
        assert shared == alone
