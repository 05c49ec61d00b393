"""The readers ``toolguard replay`` knows, one module per format, and how a file picks one.

A reader is a :class:`Reader`: a name, the file suffixes it claims (a directory walk takes every
file with one of them), ``detect(path, head)`` (``head``: the first 64 KB of the file) and
``read(source)``, a generator of :class:`~toolguard.replay._model.Run` objects that reports
skipped lines and unused records on its :class:`~toolguard.replay._model.Source`. Adding a
format is one module that defines ``READER`` plus its line in :func:`readers`. ``Reader``
itself lives in ``_model`` (re-exported here), so a reader module does not import the
registry that imports it.
"""

from __future__ import annotations

from pathlib import Path

from ._model import Reader

__all__ = ["Reader", "detect", "reader_named", "readers", "suffixes"]


def readers() -> tuple[Reader, ...]:
    """Every reader, in detection order: the most specific signatures first, the generic
    chat and trace formats last."""
    from . import (
        _chat,
        _claude_code,
        _codex,
        _inspect,
        _langfuse,
        _mini_swe_agent,
        _openhands,
        _otel,
        _responses,
        _swe_agent,
        _tau2,
        _trace,
    )

    return (_inspect.READER, _langfuse.READER, _otel.READER, _openhands.READER,
            _swe_agent.READER, _mini_swe_agent.READER, _tau2.READER, _claude_code.READER,
            _codex.READER, _responses.READER, _chat.READER, _trace.READER)


def detect(path: Path, head: bytes) -> Reader | None:
    """The first reader that recognises the file, or ``None``."""
    return next((r for r in readers() if r.detect(path, head)), None)


def reader_named(name: str) -> Reader | None:
    """The reader called ``name`` (``openai`` and ``anthropic`` name the chat reader)."""
    wanted = "chat" if name in ("openai", "anthropic") else name
    return next((r for r in readers() if r.name == wanted), None)


def suffixes() -> tuple[str, ...]:
    """Every suffix some reader claims, sorted."""
    return tuple(sorted({s for r in readers() for s in r.suffixes}))
