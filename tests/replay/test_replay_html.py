"""``toolguard replay --html``: the report page, opened in a real headless Chromium (Debian's
``/usr/bin/chromium``, driven by Playwright): it loads with no console error and no network
request, its counts are the JSON report's, filtering to flagged runs and opening a call work,
10,000 runs page, and a screenshot of it is taken."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import SHARED
from toolguard._types import Decision
from toolguard.replay import ReplayReport, RunReport, StepReport, read_runs, replay_runs
from toolguard.replay._html import write_html

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1280, "height": 900}
INPUTS = [SHARED / "cases", SHARED / "data" / "transcripts"]


def _require_browser() -> None:
    missing = None
    if not CHROMIUM.exists():
        missing = f"{CHROMIUM} is not installed (apt-get install chromium chromium-driver)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            missing = "playwright (PyPI) is not installed"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing}; CI=true requires it")
        pytest.skip(missing)


class Page:
    """A page in a fresh Chromium profile that records console errors, page errors and every
    request that is not for a file."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        self.network: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "about:"))
                else self.network.append(r.url))

    def open(self, path: Path) -> Any:
        self.page.goto(path.as_uri())
        self.page.wait_for_selector("#runs > *")
        return self.page


@pytest.fixture
def browser_page(tmp_path: Path) -> Iterator[Page]:
    _require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True,
            args=FLAGS, viewport=VIEWPORT)  # type: ignore[arg-type]
        try:
            yield Page(context.new_page())
        finally:
            context.close()


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The HTML and the JSON report of the shared recordings, from one run of the CLI."""
    page = tmp_path / "report.html"
    out = subprocess.run(
        [sys.executable, "-m", "toolguard.cli", "replay", *map(str, INPUTS),
         "--format", "json", "--html", str(page)],
        capture_output=True, text=True, check=False, timeout=300)
    assert out.returncode == 0, out.stderr
    return page, json.loads(out.stdout)


def _flagged(run: dict[str, Any]) -> bool:
    s = run["summary"]
    return bool(s["halt"] or s["error"] or any(s[d] for d in (
        "warn", "cached", "block", "review", "invalid")))


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


@pytest.mark.usefixtures("shared")
def test_the_page_shows_the_json_reports_counts(browser_page: Page,
                                                reports: tuple[Path, dict[str, Any]]) -> None:
    path, doc = reports
    page = browser_page.open(path)
    totals = doc["totals"]

    def card(key: str) -> str:
        return str(page.inner_text(f'[data-key="{key}"] .n'))

    assert card("runs") == str(totals["runs"])
    assert card("calls") == str(totals["calls"])
    assert card("executed") == str(totals["executed"])
    for decision, n in totals["decisions"].items():
        assert card(f"decision-{decision}") == str(n), decision
    flagged = sum(1 for run in doc["runs"] if _flagged(run))
    assert card("flagged") == str(flagged)
    assert card("cost") == f"${totals['cost_usd']:.4f}"
    shown = page.locator(".run")
    assert shown.count() == min(50, totals["runs"])
    # flagged runs first: the first run shown is flagged, the last one is not
    assert page.locator(".run").first.get_attribute("class") != "run sev-0"
    assert "br01-pi-runaway-noop" in page.inner_text(".run >> nth=0")
    # every call of every run shown is one square of the timeline
    replayed = {run["id"]: len(run["steps"]) for run in doc["runs"]}
    for i in range(shown.count()):
        box = shown.nth(i)
        assert box.locator(".step").count() == replayed[box.get_attribute("data-run")]
    assert browser_page.errors == []
    assert browser_page.network == []


@pytest.mark.usefixtures("shared")
def test_filtering_to_flagged_runs_and_opening_a_call(
        browser_page: Page, reports: tuple[Path, dict[str, Any]], tmp_path: Path) -> None:
    path, doc = reports
    page = browser_page.open(path)
    flagged = [run for run in doc["runs"] if _flagged(run)]
    page.click("#show-flagged")
    assert page.inner_text("#page").startswith(f"{len(flagged)} runs")
    assert page.locator(".run.sev-0").count() == 0
    assert {page.locator(".run").nth(i).get_attribute("data-run")
            for i in range(page.locator(".run").count())} == {r["id"] for r in flagged}
    # only the runs with a block
    page.select_option("#decision", "block")
    blocked = [run for run in doc["runs"] if run["summary"]["block"]]
    assert page.inner_text("#page").startswith(f"{len(blocked)} runs")
    # open the first blocked call of the first run shown
    box = page.locator(".run").first
    run = next(r for r in doc["runs"] if r["id"] == box.get_attribute("data-run"))
    index = next(s["index"] for s in run["steps"] if s["decision"] == "block")
    box.locator(".step").nth(index).click()
    panel = page.locator("aside.open")
    panel.wait_for()
    step = run["steps"][index]
    assert panel.locator("h2").inner_text() == step["tool"]
    text = panel.inner_text()
    assert "block" in text
    assert step["reason"] in text
    assert f"step {index} of run" in text
    assert "what the model got instead" in text.lower()
    assert "[toolguard]" in text  # the synthetic result the model got
    page.keyboard.press("Escape")
    assert page.locator("aside.open").count() == 0
    # the search narrows by run id
    page.click("#show-all")
    page.select_option("#decision", "")
    page.fill("#search", "br03")
    assert page.inner_text("#page").startswith("1 runs")
    page.fill("#search", "")
    page.locator(".step.warn").first.click()
    page.locator("aside.open").wait_for()
    shot = tmp_path / "report.png"
    page.screenshot(path=str(shot))
    assert _png_size(shot) == (VIEWPORT["width"], VIEWPORT["height"])
    assert shot.stat().st_size > 30_000  # a rendered page, not a blank one
    assert browser_page.errors == []
    assert browser_page.network == []


@pytest.mark.usefixtures("shared")
def test_ten_thousand_runs_are_paged(browser_page: Page, tmp_path: Path) -> None:
    runs, _ = read_runs(INPUTS)
    base = replay_runs(runs, details=True).runs
    report = ReplayReport()
    while len(report.runs) < 10_000:
        n = len(report.runs)
        report.runs += [dataclasses.replace(run, id=f"{run.id}#{n + i}")
                        for i, run in enumerate(base[: 10_000 - n])]
    path = tmp_path / "big.html"
    with path.open("w", encoding="utf-8") as out:
        write_html(report, out)
    page = browser_page.open(path)
    assert page.inner_text('[data-key="runs"] .n') == "10000"
    assert page.inner_text('[data-key="calls"] .n') == str(report.totals()["calls"])
    assert page.inner_text("#page") == "10000 runs · page 1 of 200"
    assert page.locator(".run").count() == 50  # one page in the document, not 10,000 runs
    page.click("#next")
    assert page.inner_text("#page") == "10000 runs · page 2 of 200"
    page.click("#show-flagged")
    flagged = sum(1 for r in report.runs if r.halted or r.error or any(
        s.decision.value != "allow" for s in r.steps))
    assert page.inner_text("#page").startswith(f"{flagged} runs · page 1 of")
    assert browser_page.errors == []


def test_recorded_text_is_shown_as_text_never_as_markup(browser_page: Page,
                                                        tmp_path: Path) -> None:
    hostile = '</script><img src=x onerror="document.title=\'pwned\'">'
    trace = tmp_path / "hostile.jsonl"
    trace.write_text("\n".join(json.dumps(line) for line in [
        {"run": hostile},
        {"tool": hostile, "args": {"q": hostile, "api_key": "sk-live-0123456789abcdef"},
         "result": hostile},
        {"tool": hostile, "args": {"q": hostile, "api_key": "sk-live-0123456789abcdef"},
         "result": hostile}]) + "\n")
    page_file = tmp_path / "hostile.html"
    runs, problems = read_runs([trace])
    assert problems == []
    with page_file.open("w", encoding="utf-8") as out:
        write_html(replay_runs(runs, details=True), out)
    page = browser_page.open(page_file)
    assert page.locator(".run .id").inner_text() == hostile
    page.locator(".step").first.click()
    text = page.locator("aside.open").inner_text()
    assert hostile in text
    assert "sk-live-0123456789abcdef" not in text  # the arguments are redacted
    assert "[REDACTED]" in text
    assert page.title() == "toolguard replay"
    assert page.locator("img").count() == 0
    assert browser_page.errors == []


@given(texts=st.lists(st.text(), min_size=4, max_size=4))
def test_the_embedded_data_holds_any_text_and_never_closes_its_element(
        texts: list[str]) -> None:
    run_id, tool, reason, notice = texts
    step = StepReport(0, tool, "0" * 32, None, Decision.BLOCK, reason, 3,
                      details={"args": notice, "result": reason, "notice": notice})
    report = ReplayReport([RunReport(run_id, "f.jsonl", {}, 1, "trace", 1, [step])])
    out = io.StringIO()
    write_html(report, out)
    page = out.getvalue()
    start = page.index('id="report-data">') + len('id="report-data">')
    data = page[start:page.index("</script>", start)]
    assert "</" not in data
    decoded = json.loads(data)
    strings = decoded["strings"]
    (run,) = decoded["runs"]
    assert run["id"] == run_id
    assert [strings[i] for i in (run["steps"][0][0], run["steps"][0][3], run["steps"][0][6])] \
        == [tool, reason, notice]
    assert decoded["decisions"][run["steps"][0][1]] == "block"
    assert decoded["totals"] == report.totals()


def test_a_run_id_orjson_refuses_is_written_escaped() -> None:
    """A recorded id (or tool name, reason) may hold a lone surrogate, valid in JSON text as
    ``"\\ud800"``: the page writes it escaped instead of failing."""
    import io

    from toolguard.replay import ReplayReport, RunReport
    from toolguard.replay._html import write_html

    out = io.StringIO()
    write_html(ReplayReport([RunReport("r\ud800", "a.jsonl", {}, calls=0, format="trace")]), out)
    assert "\\ud800" in out.getvalue()
