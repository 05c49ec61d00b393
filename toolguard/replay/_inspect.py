"""Inspect AI eval logs: ``.json`` (one document with ``samples``) and ``.eval`` (a zip with
``header.json`` and one ``samples/<id>_epoch_<n>.json`` per sample, read one at a time).

Each sample of each epoch is one run (``<file>/<sample id>:<epoch>``). Its ``messages`` give
the calls (assistant ``tool_calls``: ``{"id", "function", "arguments"}``), their results (``tool``
messages by ``tool_call_id``; an error when ``error`` is set) and user turns; the sample's
``model`` events give the usage of each model call, in order (``output.usage``).
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final

from toolguard.hashing._json_text import load_json

from ._model import (
    Reader,
    RecordedCall,
    ReplayInputError,
    Run,
    Source,
    Step,
    UserTurn,
    arguments,
    usage_counts,
)
from ._reading import field_list
from ._timeline import Pending

__all__ = ["READER"]

_SIGNATURE: Final = re.compile(rb'"eval"\s*:\s*\{')
_VERSION: Final = re.compile(rb'"version"\s*:\s*\d')


def _detect(path: Path, head: bytes) -> bool:
    if head.startswith(b"PK\x03\x04"):
        return path.suffix == ".eval" or b"header.json" in head or b"_journal/" in head
    return (head.lstrip()[:1] == b"{" and bool(_SIGNATURE.search(head))
            and bool(_VERSION.search(head)))


def _read(source: Source) -> Iterator[Run]:
    if source.path.suffix == ".eval" or source.read_head().startswith(b"PK\x03\x04"):
        yield from _read_zip(source)
        return
    log = source.load_json()
    if not isinstance(log, dict):
        source.problem(None, "expected an Inspect log object")
        return
    meta = _meta(log.get("eval"))
    for sample in field_list(log, "samples"):
        if isinstance(sample, dict):
            yield _sample_run(source, sample, meta)


def _read_zip(source: Source) -> Iterator[Run]:
    try:
        archive = zipfile.ZipFile(source.path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ReplayInputError(source.file, None, f"not a readable .eval zip: {exc}") from None
    with archive:
        names = archive.namelist()
        meta: dict[str, Any] = {}
        if "header.json" in names:
            header = _member(source, archive, "header.json")
            if isinstance(header, dict):
                meta = _meta(header.get("eval"))
        samples = sorted(n for n in names if n.startswith("samples/") and n.endswith(".json"))
        if not samples and "header.json" not in names:
            raise ReplayInputError(source.file, None, "a zip without header.json or samples/: "
                                                      "not an Inspect .eval log")
        for name in samples:
            sample = _member(source, archive, name)
            if isinstance(sample, dict):
                yield _sample_run(source, sample, meta)


def _member(source: Source, archive: zipfile.ZipFile, name: str) -> Any:
    try:
        return load_json(archive.read(name))
    except (OSError, zipfile.BadZipFile, json.JSONDecodeError, RecursionError) as exc:
        source.problem(None, f"{name}: cannot read: {exc}; skipped")
        return None


def _meta(spec: Any) -> dict[str, Any]:
    spec = spec if isinstance(spec, dict) else {}
    return {k: spec[k] for k in ("task", "model") if isinstance(spec.get(k), str)}


def _sample_run(source: Source, sample: Mapping[str, Any], meta: dict[str, Any]) -> Run:
    usages = [event["output"].get("usage") for event in field_list(sample, "events")
              if isinstance(event, dict) and event.get("event") == "model"
              and isinstance(event.get("output"), dict)]
    spent = iter(usages)
    steps: list[Step] = []
    pending = Pending(steps)
    for i, m in enumerate(field_list(sample, "messages")):
        role = m.get("role") if isinstance(m, dict) else None
        if role == "user":
            steps.append(UserTurn())
        elif role == "assistant":
            source.model_turns += 1
            tokens = usage_counts(next(spent, None), ("input_tokens",), ("output_tokens",))
            if tokens is not None:
                steps.append(tokens)
            tool_calls = field_list(m, "tool_calls")
            for tc in tool_calls:
                if not isinstance(tc, dict) or not isinstance(tc.get("function"), str):
                    source.problem(None, f"sample {sample.get('id')}: message {i}: a tool "
                                         "call without a function name; skipped")
                    continue
                args, raw = arguments(tc.get("arguments"), None)
                pending.add(tc.get("id"), RecordedCall(
                    tc["function"], args, raw, batch=f"message {i}" if len(tool_calls) > 1
                    else None))
        elif role == "tool":
            if not pending.answer(m.get("tool_call_id"), m.get("content"),
                                  m.get("error") is not None):
                source.unrecognised("tool messages whose call is not in the sample")
        elif role != "system":
            source.unrecognised(f"messages of role {role!r}")
    sample_id, epoch = sample.get("id"), sample.get("epoch", 1)
    run_meta = {**meta, "sample": sample_id, "epoch": epoch}
    return Run(f"{source.stem}/{sample_id}:{epoch}", source.file, "inspect", run_meta, steps)


READER: Final = Reader(
    name="inspect",
    description="Inspect AI eval log: .json or .eval (zip); one run per sample and epoch",
    suffixes=(".eval", ".json"),
    detect=_detect,
    read=_read,
)
