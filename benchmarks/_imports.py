"""Start-up cost: ``python -c "import toolguard"`` and ``toolguard --help`` against a bare
``python -c pass``, each a fresh interpreter, interleaved in shuffled rounds (the ratio is
taken within each round, then its median). Also which heavy packages a plain
``import toolguard`` loads: pydantic-settings, jsonschema, typer and rich should load only
when used.

The interpreters run without ``PYTHONDONTWRITEBYTECODE`` (set in some sandboxes): an installed
package has its bytecode compiled at install time, so the warm-up run writes toolguard's
``__pycache__`` and the timed runs read it, as a user's would. Compiling every module from
source on each start would add ~30% that no installed toolguard pays.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _harness import median

__all__ = ["LAZY", "imports"]

LAZY = ("pydantic_settings", "jsonschema", "typer", "rich", "referencing", "tomllib",
        "asyncio")
_LIMITS = {"import toolguard": 8.0, "toolguard --help": 15.0}


def _commands() -> dict[str, list[str]]:
    script = Path(sys.executable).with_name("toolguard")
    cli = ([str(script)] if script.exists()
           else [sys.executable, "-c", "import sys; from toolguard.cli import main; "
                 "sys.argv[0] = 'toolguard'; main()"])
    return {"python -c pass": [sys.executable, "-c", "pass"],
            "import toolguard": [sys.executable, "-c", "import toolguard"],
            "toolguard --help": [*cli, "--help"]}


_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _time(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=_ENV)
    return time.perf_counter() - start


def loaded_after_import() -> list[str]:
    """The packages of :data:`LAZY` that ``import toolguard`` loads (should be none)."""
    code = ("import sys, toolguard; print(' '.join(m for m in "
            f"{LAZY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, env=_ENV)
    return done.stdout.split()


def imports(rounds: int) -> dict[str, Any]:
    """Wall time of each command per round (s) and its ratio to ``python -c pass``."""
    commands = _commands()
    samples: dict[str, list[float]] = {name: [] for name in commands}
    rng = random.Random(18)
    order = list(commands)
    for cmd in commands.values():  # warm the file cache
        _time(cmd)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            samples[name].append(_time(commands[name]))
    bare = samples["python -c pass"]
    cases = []
    for name, limit in _LIMITS.items():
        ratios = [x / b for x, b in zip(samples[name], bare, strict=True)]
        cases.append({"name": name, "median_s": round(median(samples[name]), 4),
                      "x_bare": round(median(ratios), 2), "limit": limit})
    return {"rounds": rounds, "bare_s": round(median(bare), 4), "cases": cases,
            "loaded_by_import": loaded_after_import()}
