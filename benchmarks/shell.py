"""The shell classifier and the result normaliser on hostile input, and the classifier's
cost per recorded command beside a baseline.

* **hostile shapes**: each shape below at ``MAX_CHARS`` (16 KiB, the longest command the
  classifier parses; longer ones, or ones with more than ``MAX_PIPES`` pipes, are mutating
  unparsed) must be classified in under 50 ms.
  Results are normalised up to ``MAX_NORMALIZED_CHARS`` (256 KiB; longer ones are compared
  as they are): the normaliser is measured at that size and at a quarter of it.
* **recorded commands**: the 4,471 bash commands of ``data/swe-trajectories`` in the shared
  folder (``$TOOLGUARD_SHARED``, else ``../shared`` beside the checkout),
  classified without the cache, by toolguard (tree-sitter's Bash grammar and the program
  allow-list) and by ``_baseline_shell`` (a hand-written lexer, no grammar), interleaved in
  one run: microseconds per command (best of 5 passes) and their ratio; with
  ``--callgrind``, also instructions per command under valgrind over the first 300 commands
  (one process making 1 pass and one making 3 after a warm-up pass, difference / 2: exact
  on a busy machine).

Usage::

    python benchmarks/shell.py              # 16 KiB shapes + the recorded commands
    python benchmarks/shell.py --smoke      # 16 KB shapes, 200 commands, one pass (CI)
    python benchmarks/shell.py --callgrind  # also instructions per command
    python benchmarks/shell.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from _baseline_shell.classifier import _classify_text as baseline_classify

from toolguard.hashing._normalize import MAX_NORMALIZED_CHARS, default_normalizer
from toolguard.shell import _classifier as _shell
from toolguard.shell._classifier import MAX_CHARS, MAX_PIPES, _classify_text, classify_command

TARGET_MS = 50.0
CALLGRIND_COMMANDS = 300
MB = 1 << 20
RECORDED = Path(os.environ.get("TOOLGUARD_SHARED", Path(__file__).resolve().parents[2] / "shared")
                ) / "data" / "swe-trajectories"
IMPLEMENTATIONS: dict[str, Callable[[str], object]] = {
    "toolguard": lambda command: _classify_text(command, 0),
    "baseline lexer": lambda command: baseline_classify(command, 0),
}


def _uncached(command: str) -> object:
    """``classify_command`` without its cache (a repeated text would be a cache hit)."""
    _shell._CACHE.clear()
    return classify_command(command)


def recorded_commands() -> list[str]:
    """The bash commands of the recorded coding-agent runs, in order."""
    from toolguard.replay import read_runs

    runs, _ = read_runs([RECORDED])
    commands = [(call.args or {}).get("command") for run in runs for call in run.calls
                if call.tool == "bash"]
    return [command for command in commands if isinstance(command, str)]


def per_command_us(commands: list[str], passes: int) -> dict[str, float]:
    """Best-of-``passes`` microseconds per command of each implementation, interleaved."""
    best = dict.fromkeys(IMPLEMENTATIONS, float("inf"))
    for _ in range(passes):
        for name, func in IMPLEMENTATIONS.items():
            start = time.perf_counter()
            for command in commands:
                func(command)
            best[name] = min(best[name], (time.perf_counter() - start) / len(commands) * 1e6)
    return best


_CALLGRIND_CHILD = """
import sys, json
sys.path[:0] = json.loads(sys.argv[3])
import shell as bench
func = bench.IMPLEMENTATIONS[sys.argv[1]]
commands = bench.recorded_commands()[:int(sys.argv[4])]
for command in commands:  # warm-up: imports, the grammar, first-use caches
    func(command)
for _ in range(int(sys.argv[2])):
    for command in commands:
        func(command)
"""


def instructions_per_command(name: str, count: int) -> float | None:
    """Instructions per command of ``name`` under callgrind (3 passes minus 1, / 2)."""
    totals = []
    for passes in (1, 3):
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "cg.out"
            done = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                 sys.executable, "-c", _CALLGRIND_CHILD, name, str(passes),
                 json.dumps([str(Path(__file__).parent), *sys.path]), str(count)],
                capture_output=True, text=True, check=False,
                env={**os.environ, "PYTHONHASHSEED": "0"})
            if done.returncode != 0 or not out.exists():
                return None
            summary = [line for line in out.read_text().splitlines()
                       if line.startswith(("summary:", "totals:"))]
            totals.append(int(summary[-1].split()[1]))
    return (totals[1] - totals[0]) / 2 / count


def _random_text(size: int) -> str:
    rng = random.Random(16)
    alphabet = " \t\n;|&()<>'\"\\$`#{}=*?!~abcxyz019-/."
    return "".join(rng.choice(alphabet) for _ in range(size))


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda size: (unit * (size // len(unit) + 1))[:size]


# name -> builder of an input of about ``size`` characters
SHELL_INPUTS: dict[str, Callable[[int], str]] = {
    "spaces": _repeat(" "),
    "one word": _repeat("a"),
    "semicolons": _repeat(";"),
    "many commands": _repeat("ls -la; "),
    "pipeline": _repeat("cat f | "),
    "pipeline of MAX_PIPES stages": lambda n: "cat f | " * MAX_PIPES + "x" * max(
        0, n - 8 * MAX_PIPES - 1),
    "single-quoted": lambda n: "echo '" + "x" * (n - 8) + "'",
    "unclosed quote": lambda n: "echo '" + "x" * (n - 6),
    "double-quoted escapes": lambda n: 'echo "' + "\\x" * ((n - 8) // 2) + '"',
    "nested $(": _repeat("$("),
    "backticks": _repeat("`ls` "),
    "parentheses": _repeat("("),
    "redirects": _repeat("> /dev/null "),
    "here-document": lambda n: "cat > f << 'EOF'\n" + "line 'of' \"text\"\n" * (n // 18)
                               + "EOF\n",
    "long heredoc lines": lambda n: "cat << EOF\n" + "x" * n + "\nEOF",
    "random": _random_text,
}
RESULT_INPUTS: dict[str, Callable[[int], str]] = {
    "log lines": _repeat("2026-12-01T09:38:33.123Z INFO took 0.31s pid 4242 done\n"),
    "hex and digits": _repeat("0123456789abcdef"),
    "plain text": _repeat("the quick brown fox jumps over the lazy dog "),
    "random": _random_text,
}


def best_ms(func: Callable[[str], object], build: Callable[[int], str], size: int,
            repeats: int) -> float:
    times = []
    for _ in range(repeats):
        text = build(size) + " "  # a fresh object: no cache hit
        start = time.perf_counter()
        func(text)
        times.append((time.perf_counter() - start) * 1000)
    return min(times)


def measure(size: int, repeats: int) -> dict[str, dict[str, float]]:
    return {
        "classify_command": {name: best_ms(_uncached, build, min(size, MAX_CHARS) - 1,
                                           repeats)
                             for name, build in SHELL_INPUTS.items()},
        "normalize_result": {name: best_ms(default_normalizer(), build,
                                           min(size, MAX_NORMALIZED_CHARS) // (
                                               1 if size >= MB else 4) - 1, repeats)
                             for name, build in RESULT_INPUTS.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="16 KB inputs, one run each")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--callgrind", action="store_true",
                        help="also instructions per recorded command (valgrind)")
    opts = parser.parse_args()
    sizes = [16 * 1024] if opts.smoke else [256 * 1024, MB]
    repeats = 1 if opts.smoke else 5
    report: dict[str, object] = {"target_ms_per_mb": TARGET_MS, "sizes": {}}
    worst = 0.0
    for size in sizes:
        figures = measure(size, repeats)
        report["sizes"][str(size)] = figures  # type: ignore[index]
        print(f"\n{size // 1024} KB inputs (best of {repeats}, ms)")
        for section, rows in figures.items():
            scale = min(size, MAX_NORMALIZED_CHARS) // (1 if size >= MB else 4) // 1024
            print(f"  {section}" + (f" ({scale} KB)" if section == "normalize_result" else ""))
            for name, ms in rows.items():
                print(f"    {name:24} {ms:8.2f}")
                if size == MB and section == "classify_command":
                    worst = max(worst, ms)
    commands = recorded_commands() if RECORDED.is_dir() else []
    if opts.smoke:
        commands = commands[:200]
    if commands:
        per = per_command_us(commands, 1 if opts.smoke else 5)
        ratio = per["toolguard"] / per["baseline lexer"]
        print(f"\nrecorded commands ({len(commands)}, no cache, best of "
              f"{1 if opts.smoke else 5}, us per command)")
        for name, us in per.items():
            print(f"    {name:24} {us:8.1f}")
        print(f"    {'ratio':24} {ratio:8.2f}x")
        recorded: dict[str, object] = {"commands": len(commands), "us_per_command": per,
                                       "ratio": ratio}
        if opts.callgrind:  # the first CALLGRIND_COMMANDS: valgrind runs ~50x slower
            counts = {name: instructions_per_command(name, min(len(commands),
                                                               CALLGRIND_COMMANDS))
                      for name in IMPLEMENTATIONS}
            recorded["instructions_per_command"] = counts
            for name, count in counts.items():
                print(f"    {name:24} {count or 0:10.0f} instructions per command")
            ours, baseline = counts["toolguard"], counts["baseline lexer"]
            if ours and baseline:
                print(f"    {'ratio':24} {ours / baseline:8.2f}x (instructions)")
        report["recorded"] = recorded
    if not opts.smoke:
        verdict = "PASS" if worst < TARGET_MS else "MISS"
        print(f"\nworst command: {worst:.2f} ms (target < {TARGET_MS:g} ms): {verdict}")
        report["worst_1mb_ms"] = worst
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
