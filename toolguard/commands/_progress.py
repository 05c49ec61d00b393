"""What ``toolguard replay`` does on the terminal while it runs: a progress bar on stderr and
Ctrl-C that stops after the run at hand."""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # rich loads when a replay runs
    from rich.progress import Progress as Bar
    from rich.progress import TaskID

__all__ = ["CtrlC", "Progress"]

_PROGRESS_MIN_BYTES = 1 << 20  # less input replays in a blink: no progress bar
_PROGRESS_MIN_FILES = 20


class CtrlC:
    """While replaying, a first Ctrl-C (SIGINT) asks the replay to stop after the run at hand,
    so that no run is half written; a second one stops at once."""

    def __init__(self) -> None:
        self.pressed = False
        self.before: Any = None

    def __enter__(self) -> CtrlC:
        with contextlib.suppress(ValueError):  # not the main thread: Ctrl-C stays as it is
            self.before = signal.signal(signal.SIGINT, self._press)
        return self

    def _press(self, signum: int, frame: object) -> None:
        if self.pressed:
            raise KeyboardInterrupt
        self.pressed = True

    def __exit__(self, *exc: object) -> None:
        if self.before is not None:
            signal.signal(signal.SIGINT, self.before)


class Progress:
    """One progress bar on stderr while the replay runs (files and calls done, calls per
    second), for inputs big enough to take a while, on a terminal only, unless ``quiet``."""

    def __init__(self, files: Sequence[Path], quiet: bool) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        size = 0
        for path in files:
            with contextlib.suppress(OSError):  # reported when the file is read
                size += path.stat().st_size
        self.progress: Bar | None = None
        big = size >= _PROGRESS_MIN_BYTES or len(files) >= _PROGRESS_MIN_FILES
        if big and not quiet and _on_terminal():
            self.progress = Bar(
                TextColumn("replay"), BarColumn(),
                TextColumn("{task.completed}/{task.total} files, {task.fields[calls]} calls, "
                           "{task.fields[rate]} calls/s"),
                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.task: TaskID = self.progress.add_task("replay", total=len(files), calls=0,
                                                       rate=0)
        self.calls = 0
        self.started = time.monotonic()

    def __enter__(self) -> Progress:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, calls: int) -> None:
        """One more run replayed, of ``calls`` calls."""
        self.calls += calls
        if self.progress is not None:
            rate = round(self.calls / max(time.monotonic() - self.started, 1e-3))
            self.progress.update(self.task, calls=self.calls, rate=rate)

    def file_done(self) -> None:
        """One more file replayed."""
        if self.progress is not None:
            self.progress.advance(self.task)


def _on_terminal() -> bool:
    """A person is watching stderr (a progress bar would not garble a log)."""
    return sys.stderr.isatty()
