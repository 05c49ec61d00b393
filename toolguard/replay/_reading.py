"""Reading JSON from a replay input file: the head's objects for detection
(:func:`head_objects`, shared by the detectors) and the lines of a JSON-lines file a block at
a time (:func:`_blocks`, behind :meth:`Source.json_lines
<toolguard.replay._model.Source.json_lines>`)."""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate
from typing import Any, BinaryIO, Final

from toolguard.hashing._json_text import _DIGITS_TO_1, _LONG_RUN, load_json

__all__ = ["HEAD_BYTES", "head_objects"]


def head_objects(head: bytes, limit: int = 20) -> list[dict[str, Any]]:
    """The JSON objects on the first complete lines of ``head`` (at most ``limit``), for
    detecting a JSON-lines format; lines that are not JSON objects are left out. Several
    detectors ask about the same head: the last head's objects are kept (by identity), so a
    file's head is parsed once, not once per detector. Do not modify what it returns."""
    last = _last_head[0] if _last_head else None
    if last is not None and last[0] is head and last[1] >= limit:
        return last[2][:limit]
    objects = _head_objects(head, max(limit, _HEAD_OBJECTS))
    _last_head[:] = [(head, max(limit, _HEAD_OBJECTS), objects)]  # one item, swapped whole
    return objects[:limit]


_HEAD_OBJECTS: Final = 20
_last_head: list[tuple[bytes, int, list[dict[str, Any]]]] = []  # (head, limit, objects)


def _head_objects(head: bytes, limit: int) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = []
    lines = head.splitlines()
    if len(head) >= HEAD_BYTES and lines:
        lines = lines[:-1]  # the last line may be cut off
    for raw in lines:
        if len(objects) >= limit:
            break
        if not raw.strip():
            continue
        try:
            value = load_json(raw)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


HEAD_BYTES: Final = 64 * 1024
"""How much of a file detection looks at."""


_BLOCK_BYTES = 1 << 20  # not Final: a test reads with small blocks


def _blocks(handle: BinaryIO, size: int | None = None, number: int = 0
            ) -> Iterator[tuple[int, list[bytes], set[int]]]:
    """The lines of ``handle``, about a megabyte of whole lines at a time: ``(the lines before
    the block, its lines, the indices of those with a run of 19 digits)``. A run is the only
    text :func:`load_json` hands to the standard library's parser: a line without one parses
    by orjson alone as ``load_json`` would parse it, without ``load_json``'s per-line checks
    (whatever orjson refuses goes to ``load_json``, for its message). The runs are looked for
    once per block (a newline ends every run).

    ``size``: read only the lines of the next ``size`` bytes (they must end at a line's
    end); ``number``: the lines before the handle's position."""
    while block := handle.readlines(_BLOCK_BYTES):
        if size is not None:  # a portion of the file: its lines and no more
            size = _within(block, size)
        digits = b"".join(block).translate(_DIGITS_TO_1)
        at = digits.find(_LONG_RUN)
        long_runs: set[int] = set()
        if at >= 0:
            ends = list(accumulate(map(len, block)))
            while at >= 0:
                index = bisect_right(ends, at)
                long_runs.add(index)
                at = digits.find(_LONG_RUN, ends[index])
        yield number, block, long_runs
        number += len(block)
        if size == 0:
            return


def _within(block: list[bytes], size: int) -> int:
    """Drop the lines of ``block`` past the first ``size`` bytes; the bytes left after it."""
    total = sum(map(len, block))
    if total < size:
        return size - total
    for index, line in enumerate(block):
        size -= len(line)
        if size <= 0:
            del block[index + 1:]
            return 0
    return size


def field_dict(value: Any, key: str) -> dict[str, Any]:
    """``value[key]`` if ``value`` is an object and that is an object, else ``{}``."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, dict) else {}


def field_list(value: Any, key: str) -> list[Any]:
    """``value[key]`` if ``value`` is an object and that is a list, else ``[]``."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, list) else []


def text_field(value: Any, key: str) -> str | None:
    """``value[key]`` if ``value`` is an object and that is a string, else ``None`` (record
    kinds are compared with sets, which a list or an object in their place would break)."""
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None
