"""Quickstart: three tools, a scripted "model" stuck in a loop, and the guard's answer to each
call: allow → warn → block → halt (DESIGN.md §1). Run: ``python examples/quickstart.py``."""

from __future__ import annotations

import toolguard as tg


@tg.readonly
def search_docs(query: str) -> str:
    """Search the documentation."""
    return "no results"


@tg.readonly
def read_page(path: str) -> str:
    """Read one documentation page."""
    return f"# {path}\n(nothing about retries here)"


@tg.mutating
def post_answer(text: str) -> str:
    """Post the answer to the user."""
    return "posted"


# What the model proposes, turn after turn: it reads a page, then repeats one search forever.
SCRIPT: list[tuple[str, dict[str, str]]] = [
    ("read_page", {"path": "docs/index.md"}),
    *[("search_docs", {"query": "retry budget"})] * 5,
    ("post_answer", {"text": "I could not find it."}),
]


def main() -> None:
    guard = tg.Guard(tools=[search_docs, read_page, post_answer])
    task = guard.task("quickstart")
    for tool, args in SCRIPT:
        try:
            result = task.call(tool, args)
        except tg.Halt as halt:
            print(f"halt   {tool} {args}  {halt.reason}")
            break
        print(f"{result.decision!s:6} {tool} {args}  {result.reason}".rstrip())


if __name__ == "__main__":
    main()
