"""Instructions per call under ``valgrind --tool=callgrind``: exact and repeatable on a busy
machine, where wall-clock time is not.

Each variant runs in two fresh interpreters under callgrind, one making ``n`` calls and one
``k * n``, after the same set-up and warm-up calls; the difference of their instruction
totals divided by ``(k - 1) * n`` is the cost of one call, with start-up, imports and
set-up cancelled out. Variants:

* ``guard/<size>/<path>``: ``task.call`` of the default guard (jsonschema-rs) on the
  benchmark tools and policies of ``_cases.py`` (``allow``, ``cached``, ``block``, ``warn``,
  ``executed``: never-seen arguments, ``allow_new``: likewise on the read-only tool,
  ``invalid``: arguments with one integer given as a string, the last in the value);
  ``.../async``: ``await task.acall`` of the async tool; ``.../json``: arguments as JSON text;
  ``.../text``: the tool returns a fixed shell-like text (``_cases.TEXT_RESULT``), which the
  result normalization reads; configurations (flags, any combination): ``.../default``: the
  policy of ``policies/default.toml`` (its failure budget, audit settings and default effect;
  the benchmark's ladder, and no call or time budget, so that repeats stay allowed),
  ``.../jsonl``: a ``JsonlSink`` writing to a temporary file, ``.../observe``: ``mode =
  "observe"``, ``.../sub``: a ``MemoryStore`` subclass as the store;
* ``book/<size>/<path>``, ``min/<size>/<path>``, ``full/<size>/<path>``: the bookkeeping,
  minimal and feature-complete sketches of ``_sketches.py`` (``x_sketch_full``: the guard
  over the feature-complete sketch, same size and path);
* ``dump/<size>``: ``orjson.dumps(args, option=OPT_SORT_KEYS)`` (the large target's floor).

Run::

    python benchmarks/callgrind.py                  # the per-call targets' set, ~2 min on 2 cores
    python benchmarks/callgrind.py guard/small/allow book/small/allow
    python benchmarks/callgrind.py --json benchmarks/results/callgrind.json

Prints one line per variant (instructions per call) and the ratios the targets are read by.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT = (
    "guard/small/allow", "guard/small/cached", "guard/small/block", "guard/small/warn",
    "guard/small/executed", "guard/small/allow/async", "guard/medium/allow",
    "guard/medium/cached", "guard/large/allow", "book/small/allow", "book/small/cached",
    "book/small/block", "book/medium/allow", "book/medium/cached", "min/small/allow",
    "full/small/allow", "full/small/cached", "full/small/block", "full/medium/allow",
    "dump/large", "guard/small/invalid", "guard/large/invalid",
)
# (guard variant, its reference, target ratio)
TARGETS = (
    ("guard/small/allow", "book/small/allow", 2.0),
    ("guard/small/allow", "full/small/allow", 1.5),
    ("guard/small/cached", "book/small/cached", 2.0),
    ("guard/small/block", "book/small/block", 2.0),
    ("guard/medium/allow", "book/medium/allow", 1.5),
    ("guard/large/allow", "dump/large", 1.3),
    ("guard/small/invalid", "guard/small/allow", 2.0),
    ("guard/large/invalid", "guard/large/allow", 2.0),
)
_TOTAL = re.compile(rb"^(?:summary|totals): (\d+)", re.MULTILINE)


def _calls(name: str) -> int:
    """Calls per measurement: fewer for large arguments (~1M instructions each)."""
    return 20 if "/large" in name else 400


def _runner(name: str) -> Callable[[int], None]:
    """``run(n)``: ``n`` calls of variant ``name``, after its set-up and warm-up."""
    sys.path.insert(0, str(HERE))
    import orjson
    from _args import args_for, distinct, sized

    parts = name.split("/")
    kind, size = parts[0], parts[1]
    args = args_for(size)
    if kind == "dump":
        dumps, sort = orjson.dumps, orjson.OPT_SORT_KEYS

        def dump(n: int) -> None:
            for _ in range(n):
                dumps(args, option=sort)

        return dump
    path = parts[2]
    if kind in ("book", "min", "full"):
        from _cases import BIG
        from _sketches import BookkeepingSketch, FeatureSketch, MinimalSketch

        from toolguard.tools._schema import schema_from_signature

        sz = sized(size)
        cls = {"book": BookkeepingSketch, "min": MinimalSketch, "full": FeatureSketch}[kind]
        sketch = cls(sz.tool.__name__, sz.tool, schema_from_signature(sz.tool),
                     mutating=path == "cached", warn_at=2 if path == "block" else BIG,
                     block_at=2 if path == "block" else BIG)
        call, tool = sketch.call, sz.tool.__name__
        call(tool, args)
        call(tool, args)

        def calls(n: int) -> None:
            for _ in range(n):
                call(tool, args)

        return calls
    from _cases import make_task

    flags = set(parts[3:])
    from _cases import TEXT_RESULT

    task, tool = make_task(size, "allow" if path in ("allow_new", "invalid") else path, "rs",
                           is_async="async" in flags,
                           returns=TEXT_RESULT if "text" in flags else None)
    if flags & {"default", "jsonl", "observe", "sub"}:
        task = _configured(task, tool, flags)
    if path == "invalid":
        from _args import invalid

        args = invalid(size)
    given: Any = orjson.dumps(args).decode() if "json" in flags else args
    fresh = path in ("executed", "allow_new")
    ids = itertools.count()
    if "async" in flags:
        loop = asyncio.new_event_loop()

        async def batch(n: int) -> None:
            for _ in range(n):
                await task.acall(tool, distinct(size, next(ids)) if fresh else given)

        loop.run_until_complete(batch(20))
        return lambda n: loop.run_until_complete(batch(n))

    def run(n: int) -> None:
        for _ in range(n):
            task.call(tool, distinct(size, next(ids)) if fresh else given)

    run(20)
    return run


def _configured(task: Any, tool: str, flags: set[str]) -> Any:
    """A task of a new guard like ``task``'s with the configuration ``flags`` name (see the
    module docstring)."""
    import dataclasses

    import toolguard as tg
    from toolguard.stores.memory import MemoryStore

    policy = task.guard._config.policy
    if "default" in flags:
        shipped = tg.load_policy(HERE.parent / "policies" / "default.toml", env={})
        policy = shipped.model_copy(update={
            "ladder": policy.ladder,
            "budget": shipped.budget.model_copy(update={
                "max_tool_calls": None, "max_tokens": None, "timeout_s": None})})
    if "observe" in flags:
        policy = policy.model_copy(update={"mode": tg.Mode.OBSERVE})

    class Sub(MemoryStore):
        pass

    sinks = [tg.JsonlSink(tempfile.mkstemp(suffix=".jsonl")[1])] if "jsonl" in flags else []
    spec = task.guard._config.entries[tool].spec
    guard = tg.Guard(policy, [dataclasses.replace(spec)], audit=sinks,
                     store=Sub() if "sub" in flags else None)
    return guard.task(task.task_id)


def _child(name: str, n: int) -> None:
    _runner(name)(n)


def _instructions(name: str, n: int) -> int:
    """Total instructions of one interpreter making ``n`` calls of ``name``."""
    return instructions_of([str(Path(__file__).resolve()), "--child", name, str(n)])


def instructions_of(argv: list[str]) -> int:
    """Total instructions of one interpreter running ``python *argv`` under callgrind
    (``PYTHONHASHSEED=0``, output discarded)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, *argv],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONHASHSEED": "0"})
        match = _TOTAL.search(Path(out).read_bytes())
        if match is None:
            raise RuntimeError(f"no instruction total in callgrind's output for {argv}")
        return int(match.group(1))


def measure(names: list[str], jobs: int = 2, factor: int = 3) -> dict[str, float]:
    """Instructions per call of each variant (see the module docstring)."""
    jobs_list = [(name, _calls(name) * k) for name in names for k in (1, factor)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        totals = dict(zip(jobs_list, pool.map(lambda j: _instructions(*j), jobs_list),
                          strict=True))
    return {name: (totals[name, _calls(name) * factor] - totals[name, _calls(name)])
            / ((factor - 1) * _calls(name)) for name in names}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("variants", nargs="*", help=f"default: {' '.join(DEFAULT)}")
    parser.add_argument("--json", type=Path, help="write {variant: instructions per call}")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.child:
        _child(ns.child[0], int(ns.child[1]))
        return 0
    names = ns.variants or list(DEFAULT)
    per_call = measure(names, ns.jobs)
    for name in names:
        print(f"{name:32} {per_call[name]:>12,.0f} instructions/call")
    for guard, ref, target in TARGETS:
        if guard in per_call and ref in per_call:
            ratio = per_call[guard] / per_call[ref]
            verdict = "PASS" if ratio <= target else "MISS"
            print(f"{guard} / {ref}: {ratio:.2f}x (target <= {target}x) {verdict}")
    for name in names:
        guard = "guard/" + name.removeprefix("full/")
        if name.startswith("full/") and guard in per_call:
            print(f"x_sketch_full {guard}: {per_call[guard] / per_call[name]:.2f}x")
    if ns.json:
        ns.json.write_text(json.dumps(per_call, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
