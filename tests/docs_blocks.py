"""Code blocks of the README and the docs pages marked runnable (an ``<!-- runnable -->`` line
just before a ```` ```python ```` fence, or the README's Quickstart between its snippet
markers), for the tests that run them as written."""

from __future__ import annotations

import re

from .conftest import ROOT

RUNNABLE = "<!-- runnable -->"
_FENCE = re.compile(r"```python\n(.*?)\n```", re.DOTALL)


def readme_quickstart() -> str:
    """The README's Quickstart, exactly as a user would paste it."""
    text = (ROOT / "README.md").read_text()
    start = text.index("<!-- --8<-- [start:quickstart] -->")
    end = text.index("<!-- --8<-- [end:quickstart] -->")
    match = _FENCE.search(text, start, end)
    assert match is not None, "the README's Quickstart has no ```python block"
    return match.group(1) + "\n"


def runnable_blocks() -> dict[str, str]:
    """Every runnable block of ``README.md`` and ``docs/``, by ``file:line``."""
    blocks: dict[str, str] = {}
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        text = path.read_text()
        for marker in re.finditer(re.escape(RUNNABLE) + r"\n", text):
            match = _FENCE.match(text, marker.end())
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, marker.start()) + 1}"
            assert match is not None, f"{where}: {RUNNABLE} is not followed by a ```python block"
            blocks[where] = match.group(1) + "\n"
    blocks["README.md:quickstart"] = readme_quickstart()
    return blocks
