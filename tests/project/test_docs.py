"""The documentation: the site builds with ``mkdocs build --strict`` (a broken link, a missing
page or an unresolvable API reference fails it), every page is in its navigation, every block
marked runnable runs as written from an empty directory, and the README stays a page long,
without development history."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.docs_blocks import runnable_blocks

DOCS = ROOT / "docs"


def test_the_site_builds_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          check=False, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    policies = (tmp_path / "site" / "policies" / "index.html").read_text()
    assert "tools.NAME.rules[].match" in policies  # the keys generated from the schema
    reference = (tmp_path / "site" / "reference" / "index.html").read_text()
    assert 'id="toolguard.Guard"' in reference  # the API reference from the docstrings


BLOCKS = runnable_blocks()


@pytest.mark.parametrize("where", sorted(BLOCKS))
def test_a_runnable_block_runs_as_written(where: str, tmp_path: Path) -> None:
    script = tmp_path / "block.py"
    script.write_text(BLOCKS[where])
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{where}:\n{done.stdout}\n{done.stderr}"
    assert done.stderr == ""


def test_the_docs_have_runnable_blocks() -> None:
    pages = {where.split(":")[0] for where in BLOCKS}
    assert {"README.md", "docs/concepts/ladder.md", "docs/concepts/idempotency.md"} <= pages


def _nav_pages(entries: object) -> list[str]:
    if isinstance(entries, str):
        return [entries]
    if isinstance(entries, list):
        return [page for entry in entries for page in _nav_pages(entry)]
    if isinstance(entries, dict):
        return [page for value in entries.values() for page in _nav_pages(value)]
    return []


def test_every_page_is_in_the_navigation() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages


def test_the_readme_is_a_page_long() -> None:
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_no_development_history_in_user_facing_text() -> None:
    history = re.compile(r"issue [0-9]|session of 20|this round|before this round", re.IGNORECASE)
    texts = [ROOT / "README.md", *DOCS.rglob("*.md"), *(ROOT / "toolguard").rglob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in texts
             for n, line in enumerate(path.read_text().splitlines(), 1) if history.search(line)]
    assert found == []
    names = [p.name for p in (ROOT / "tests").rglob("*")
             if history.search(p.name.replace("_", " "))]
    assert names == []
