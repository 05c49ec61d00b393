"""The shell classifier and the result normaliser on hostile input: 1 MB of each shape below
must be classified in under 50 ms, and the time must grow linearly with the size. Results
are normalised up to ``MAX_NORMALIZED_CHARS`` (256 KiB; longer ones are compared as they
are): the normaliser is measured at that size and at a quarter of it.

Usage::

    python benchmarks/shell.py              # 1 MB inputs (and 256 KB, for linearity)
    python benchmarks/shell.py --smoke      # 16 KB inputs: every shape runs (CI)
    python benchmarks/shell.py --json out.json

Each figure is the best of 5 runs of a fresh string (the classifier caches commands up to
64 KiB, so smaller inputs get a new one each run). The regex rules the classifier replaced
took 5.3 s on 32 KB of spaces.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from toolguard._normalize import MAX_NORMALIZED_CHARS, default_normalizer
from toolguard._shell import classify_command

TARGET_MS = 50.0
MB = 1 << 20


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
        "classify_command": {name: best_ms(classify_command, build, size, repeats)
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
    if not opts.smoke:
        verdict = "PASS" if worst < TARGET_MS else "MISS"
        print(f"\nworst 1 MB command: {worst:.2f} ms (target < {TARGET_MS:g} ms): {verdict}")
        report["worst_1mb_ms"] = worst
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
