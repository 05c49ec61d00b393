"""The HTML replay report (``toolguard replay --html REPORT.html``): one self-contained file.

Everything is inline (CSS, script, data): it opens from disk with no network. Its numbers are
the JSON report's: the totals are :meth:`ReplayReport.totals`, each run's counts its
:meth:`RunReport.summary`. The page shows the totals, then the runs, flagged runs first (a
halt or a guard error, then block, invalid, review, warn or cached), 50 to a page, each with a
timeline of its calls coloured by decision; clicking a call shows its tool, its redacted
arguments, the recorded result, what the guard gave the model and why. The runs can be
filtered to the flagged ones, to those reaching one decision, or by text in a run's id or
tools.

The data is written run by run (:class:`HtmlWriter`) as compact JSON inside a
``<script type="application/json">`` element; repeated texts (tool names, reasons, notices)
are written once, in a string table. Every text reaches the page through ``textContent``,
never as markup.
"""

from __future__ import annotations

import html
import json
from typing import IO, Any, Final

import orjson

from toolguard._types import Decision

from ._runner import ReplayReport, RunReport, StepReport

__all__ = ["HtmlWriter", "write_html"]

DECISIONS: Final = tuple(str(d) for d in Decision)
"""The decisions in the order the page's step arrays number them."""


class HtmlWriter:
    """Writes the report to ``out`` run by run: :meth:`run` for each run, then
    :meth:`close` with the totals (the page needs no run twice, so a caller that streams runs
    can write each as it is replayed).

    Args:
        out: a text stream (a file opened with ``encoding="utf-8"``).
        title: the page's title.
    """

    def __init__(self, out: IO[str], title: str = "toolguard replay") -> None:
        self._out = out
        self._strings: dict[str, int] = {}
        self._first = True
        out.write(_HEAD.replace("%TITLE%", html.escape(title)))
        out.write('<script type="application/json" id="report-data">{"runs":[')

    def run(self, run: RunReport) -> None:
        """Add one run (its summary and its steps)."""
        summary = run.summary()
        record = {
            "id": run.id, "format": run.format, "calls": run.calls, "replayed": run.replayed,
            "counts": [summary[d] for d in DECISIONS if d != "halt"],
            "halt": summary["halt"], "halted_at": summary["halted_at"],
            "halt_reason": summary["halt_reason"], "error": summary["error"],
            "tokens": summary["tokens"], "cost": summary["cost_usd"],
            "unpriced": summary["unpriced_tokens"],
            "steps": [self._step(step) for step in run.steps],
        }
        self._write(("" if self._first else ",") + _json(record))
        self._first = False

    def close(self, totals: dict[str, Any]) -> None:
        """Finish the page with the report's ``totals`` (:meth:`ReplayReport.totals`)."""
        strings = sorted(self._strings, key=self._strings.__getitem__)
        self._write('],"strings":' + _json(strings) + ',"decisions":' + _json(DECISIONS)
                    + ',"totals":' + _json(totals) + "}")
        self._out.write("</script>\n<script>" + _SCRIPT + "</script>\n</body>\n</html>\n")

    def _step(self, step: StepReport) -> list[Any]:
        details = step.details or {}
        tool = "(token usage)" if step.tool is None else step.tool
        return [self._string(tool), DECISIONS.index(str(step.decision)),
                step.count, self._string(step.reason), self._string(details.get("args", "")),
                self._string(details.get("result", "")),
                self._string(details.get("notice", ""))]

    def _string(self, text: str) -> int:
        index = self._strings.get(text)
        if index is None:
            index = self._strings[text] = len(self._strings)
        return index

    def _write(self, text: str) -> None:
        # inside <script>, "</" could close the element: JSON allows "<\/" for it
        self._out.write(text.replace("</", "<\\/"))


def write_html(report: ReplayReport, out: IO[str], title: str = "toolguard replay") -> None:
    """Write the whole report as one HTML page to ``out`` (see the module docstring)."""
    writer = HtmlWriter(out, title)
    for run in report.runs:
        writer.run(run)
    writer.close(report.totals())


def _json(value: Any) -> str:
    """``value`` as JSON text: by orjson; by the standard library where orjson refuses a
    value (a lone surrogate in a recorded id or name, an integer beyond 64 bits), which
    escapes it (``\\ud800``) and writes integers exactly."""
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return json.dumps(value, default=str)


_HEAD: Final = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>
:root {
  --bg: #f6f7f9; --card: #fff; --ink: #1d2330; --mute: #6b7385; --line: #e3e6ec;
  --allow: #3a9b5c; --warn: #e0a100; --cached: #2a93b5; --block: #d64541;
  --review: #8e5cc7; --invalid: #e5733a; --halt: #7d1128; --accent: #3856d6;
}
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  background: var(--bg); color: var(--ink); }
header { background: #1d2330; color: #fff; padding: 18px 28px; display: flex;
  align-items: baseline; gap: 14px; }
header h1 { margin: 0; font-size: 20px; font-weight: 650; letter-spacing: .2px; }
header .sub { color: #b8bfcc; font-size: 13px; }
main { padding: 20px 28px 40px; max-width: 1400px; margin: 0 auto; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(86px, 1fr));
  gap: 8px; margin-bottom: 12px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 9px 10px; border-top: 4px solid var(--line); }
.card .n { font-size: 22px; font-weight: 700; font-variant-numeric: tabular-nums;
  white-space: nowrap; }
.card .k { color: var(--mute); font-size: 11px; text-transform: uppercase;
  letter-spacing: .3px; white-space: nowrap; }
.card .x { color: var(--mute); font-size: 11.5px; }
.bar { display: flex; height: 12px; border-radius: 6px; overflow: hidden;
  background: var(--line); margin: 2px 0 8px; }
.bar span { display: block; height: 100%; }
.card.allow { border-top-color: var(--allow); } .card.warn { border-top-color: var(--warn); }
.card.cached { border-top-color: var(--cached); } .card.block { border-top-color: var(--block); }
.card.review { border-top-color: var(--review); }
.card.invalid { border-top-color: var(--invalid); }
.card.halt { border-top-color: var(--halt); } .card.flagged { border-top-color: var(--accent); }
.card.wide { grid-column: span 2; }
.note { color: var(--mute); margin: 4px 0 16px; }
.controls { display: flex; flex-wrap: wrap; gap: 10px; align-items: center;
  background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 10px 12px; margin-bottom: 14px; position: sticky; top: 0; z-index: 2; }
.seg { display: inline-flex; border: 1px solid var(--line); border-radius: 8px;
  overflow: hidden; }
.seg button { border: 0; background: #fff; padding: 7px 12px; cursor: pointer; font: inherit; }
.seg button.on { background: var(--accent); color: #fff; }
select, input[type=search] { font: inherit; padding: 6px 9px; border: 1px solid var(--line);
  border-radius: 8px; background: #fff; }
input[type=search] { min-width: 220px; }
.pager { margin-left: auto; display: flex; gap: 8px; align-items: center; color: var(--mute); }
.pager button { font: inherit; padding: 6px 10px; border: 1px solid var(--line);
  border-radius: 8px; background: #fff; cursor: pointer; }
.pager button:disabled { opacity: .4; cursor: default; }
.run { background: var(--card); border: 1px solid var(--line); border-radius: 10px;
  padding: 12px 14px; margin-bottom: 10px; border-left: 5px solid var(--allow); }
.run.sev-1 { border-left-color: var(--warn); } .run.sev-2 { border-left-color: var(--review); }
.run.sev-3 { border-left-color: var(--invalid); } .run.sev-4 { border-left-color: var(--block); }
.run.sev-5 { border-left-color: var(--halt); }
.run .top { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; }
.run .id { font-weight: 650; word-break: break-all; }
.badge { display: inline-block; padding: 1px 8px; border-radius: 999px; font-size: 12px;
  color: #fff; font-weight: 600; }
.badge.fmt { background: #eef0f5; color: var(--mute); font-weight: 500; }
.badge.allow { background: var(--allow); } .badge.warn { background: var(--warn); }
.badge.cached { background: var(--cached); } .badge.block { background: var(--block); }
.badge.review { background: var(--review); } .badge.invalid { background: var(--invalid); }
.badge.halt { background: var(--halt); }
.run .meta { color: var(--mute); font-size: 12.5px; margin-left: auto; }
.run .why { color: var(--halt); font-size: 13px; margin-top: 4px; }
.timeline { display: flex; flex-wrap: wrap; gap: 3px; margin-top: 9px; }
.step { width: 14px; height: 22px; border-radius: 3px; border: 0; padding: 0;
  cursor: pointer; background: var(--allow); }
.step:hover, .step.sel { outline: 2px solid var(--ink); outline-offset: 1px; }
.step.warn { background: var(--warn); } .step.cached { background: var(--cached); }
.step.block { background: var(--block); } .step.review { background: var(--review); }
.step.invalid { background: var(--invalid); }
.step.halt { background: var(--halt); width: 22px; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; color: var(--mute); font-size: 12.5px;
  margin: 0 0 12px; }
.legend i { display: inline-block; width: 10px; height: 14px; border-radius: 2px;
  vertical-align: -2px; margin-right: 5px; }
.empty { color: var(--mute); padding: 30px; text-align: center; }
aside { position: fixed; top: 0; right: 0; bottom: 0; width: min(500px, 92vw);
  background: #fff; border-left: 1px solid var(--line); box-shadow: -8px 0 24px #0002;
  padding: 18px 22px; overflow: auto; transform: translateX(105%);
  transition: transform .15s ease; z-index: 5; }
aside.open { transform: none; }
@media (min-width: 1100px) { body.panel main { margin-right: 500px; } }
aside h2 { margin: 0 0 4px; font-size: 18px; word-break: break-all; }
aside .close { position: absolute; top: 12px; right: 14px; border: 0; background: none;
  font-size: 22px; cursor: pointer; color: var(--mute); }
aside dl { margin: 12px 0 0; }
aside dt { color: var(--mute); font-size: 12px; text-transform: uppercase;
  letter-spacing: .5px; margin-top: 12px; }
aside dd { margin: 3px 0 0; }
aside pre { margin: 0; white-space: pre-wrap; word-break: break-word; background: #f3f4f7;
  border: 1px solid var(--line); border-radius: 8px; padding: 8px 10px;
  font: 12.5px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
</style>
</head>
<body>
<header><h1>toolguard replay</h1><span class="sub" id="subtitle"></span></header>
<main>
<section class="cards" id="cards"></section>
<div class="bar" id="bar" title="calls by decision"></div>
<p class="note" id="runs-with"></p>
<div class="legend" id="legend"></div>
<div class="controls">
  <div class="seg" role="group" aria-label="runs shown">
    <button id="show-all" class="on">All runs</button>
    <button id="show-flagged">Flagged</button>
  </div>
  <select id="decision" aria-label="decision">
    <option value="">any decision</option>
  </select>
  <input type="search" id="search" placeholder="run id or tool" aria-label="search">
  <div class="pager"><button id="prev">&#8249; Prev</button>
    <span id="page"></span><button id="next">Next &#8250;</button></div>
</div>
<section id="runs"></section>
</main>
<aside id="detail" aria-hidden="true"><button class="close" id="close"
  aria-label="close">&times;</button><div id="detail-body"></div></aside>
"""

_SCRIPT: Final = r"""
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("report-data").textContent);
  const S = data.strings, D = data.decisions, T = data.totals;
  const PAGE = 50;
  const COUNTED = D.filter(d => d !== "halt");
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  };
  const count = (run, d) => d === "halt" ? (run.halt ? 1 : 0) : run.counts[COUNTED.indexOf(d)];
  // severity: 5 halt or error, 4 block, 3 invalid, 2 review, 1 warn or cached, 0 clean
  const severity = run => run.halt || run.error ? 5 : count(run, "block") ? 4 :
    count(run, "invalid") ? 3 : count(run, "review") ? 2 :
    count(run, "warn") || count(run, "cached") ? 1 : 0;
  data.runs.forEach((run, i) => { run.order = i; run.sev = severity(run); });
  const sorted = data.runs.slice().sort((a, b) => b.sev - a.sev || a.order - b.order);
  const flagged = sorted.filter(r => r.sev > 0).length;
  const money = (usd, unpriced) => "$" + usd.toFixed(4) + (unpriced ? "+?" : "");

  // -- summary ------------------------------------------------------------------------
  const cards = document.getElementById("cards");
  const card = (key, label, value, cls, extra) => {
    const c = el("div", "card " + (cls || ""));
    c.append(el("div", "n", value), el("div", "k", label));
    if (extra) c.append(el("div", "x", extra));
    c.dataset.key = key;
    cards.append(c);
  };
  const compact = n => n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e4 ?
    Math.round(n / 1e3) + "k" : String(n);
  card("runs", "runs", T.runs);
  card("flagged", "flagged", flagged, "flagged");
  card("calls", "calls", T.calls);
  card("executed", "executed", T.executed);
  for (const d of D) card("decision-" + d, d === "halt" ? "halted" : d,
                          T.decisions[d], d);
  if (T.tokens) card("cost", "cost", "$" + T.cost_usd.toFixed(4), "wide",
                     T.unpriced_tokens ? "+ " + compact(T.unpriced_tokens) + " tokens unpriced"
                                       : "");
  const bar = document.getElementById("bar");
  for (const d of COUNTED) {
    if (!T.decisions[d]) continue;
    const part = el("span");
    part.style.flex = String(T.decisions[d]);
    part.style.background = "var(--" + d + ")";
    part.title = d + ": " + T.decisions[d] + " calls";
    bar.append(part);
  }
  document.getElementById("subtitle").textContent =
    T.runs + " runs, " + T.calls + " calls" +
    (T.not_replayed ? ", " + T.not_replayed + " not replayed after a halt" : "") +
    (T.problems ? ", " + T.problems + " input problems" : "");
  document.getElementById("runs-with").textContent = "Runs with " +
    D.filter(d => d !== "allow").map(d => d + " " + T.runs_with[d]).join(", ") + ".";
  const legend = document.getElementById("legend");
  const select = document.getElementById("decision");
  for (const d of D) {
    const item = el("span", "", d);
    const swatch = el("i");
    swatch.style.background = "var(--" + d + ")";
    item.prepend(swatch);
    legend.append(item);
    const option = el("option", "", d);
    option.value = d;
    select.append(option);
  }

  // -- runs ---------------------------------------------------------------------------
  const state = { flagged: false, decision: "", text: "", page: 0 };
  const list = document.getElementById("runs");
  const matches = run => (!state.flagged || run.sev > 0)
    && (!state.decision || count(run, state.decision) > 0)
    && (!state.text || run.id.toLowerCase().includes(state.text)
        || run.steps.some(s => S[s[0]].toLowerCase().includes(state.text)));
  let shown = sorted;
  let selected = null;

  function renderRun(run) {
    const box = el("article", "run sev-" + run.sev);
    box.dataset.run = run.id;
    const top = el("div", "top");
    top.append(el("span", "id", run.id));
    if (run.format) top.append(el("span", "badge fmt", run.format));
    for (const d of D) {
      const n = count(run, d);
      if (d !== "allow" && n) top.append(el("span", "badge " + d, d === "halt" ? d : d + " " + n));
    }
    const meta = (run.replayed < run.calls ? run.replayed + " of " + run.calls + " calls replayed"
      : run.calls + " calls") + (run.tokens ? " · " + money(run.cost, run.unpriced) : "");
    top.append(el("span", "meta", meta));
    box.append(top);
    if (run.error) box.append(el("div", "why", "guard error: " + run.error));
    else if (run.halt) box.append(el("div", "why",
      "halted at step " + run.halted_at + ": " + run.halt_reason));
    const line = el("div", "timeline");
    run.steps.forEach((s, i) => {
      const d = D[s[1]];
      const b = el("button", "step " + d);
      b.title = "step " + i + ": " + S[s[0]] + " \u2014 " + d;
      b.setAttribute("aria-label", b.title);
      b.addEventListener("click", () => open(run, i, b));
      line.append(b);
    });
    box.append(line);
    return box;
  }

  function render() {
    shown = sorted.filter(matches);
    const pages = Math.max(1, Math.ceil(shown.length / PAGE));
    state.page = Math.min(state.page, pages - 1);
    list.replaceChildren();
    const slice = shown.slice(state.page * PAGE, (state.page + 1) * PAGE);
    if (!slice.length) list.append(el("div", "empty", "No run matches."));
    for (const run of slice) list.append(renderRun(run));
    document.getElementById("page").textContent = shown.length + " runs · page " +
      (state.page + 1) + " of " + pages;
    document.getElementById("prev").disabled = state.page === 0;
    document.getElementById("next").disabled = state.page >= pages - 1;
    document.getElementById("show-all").classList.toggle("on", !state.flagged);
    document.getElementById("show-flagged").classList.toggle("on", state.flagged);
  }

  // -- one call -----------------------------------------------------------------------
  const panel = document.getElementById("detail");
  function open(run, i, button) {
    const s = run.steps[i], d = D[s[1]];
    if (selected) selected.classList.remove("sel");
    selected = button;
    button.classList.add("sel");
    const body = document.getElementById("detail-body");
    body.replaceChildren();
    body.append(el("h2", "", S[s[0]]));
    const head = el("div", "");
    head.append(el("span", "badge " + d, d), el("span", "", "  step " + i + " of run "),
                el("b", "", run.id));
    body.append(head);
    const dl = el("dl");
    const row = (label, text, pre) => {
      if (text === "" || text === undefined) return;
      dl.append(el("dt", "", label));
      const dd = el("dd");
      dd.append(pre ? el("pre", "", text) : document.createTextNode(text));
      dl.append(dd);
    };
    row("Why", S[s[3]] || (d === "allow" ? "a first or normal call" : ""));
    row("Repeat count", s[2] ? String(s[2]) : "");
    row("Arguments (redacted)", S[s[4]], true);
    row(d === "allow" || d === "warn" ? "Recorded result (fed back)"
                                      : "Recorded result (not fed back)", S[s[5]], true);
    row(d === "warn" ? "Notice appended to the result"
                     : "What the model got instead", S[s[6]], true);
    body.append(dl);
    panel.classList.add("open");
    panel.setAttribute("aria-hidden", "false");
    document.body.classList.add("panel");
  }
  const close = () => {
    panel.classList.remove("open");
    panel.setAttribute("aria-hidden", "true");
    document.body.classList.remove("panel");
    if (selected) selected.classList.remove("sel");
    selected = null;
  };
  document.getElementById("close").addEventListener("click", close);
  document.addEventListener("keydown", e => { if (e.key === "Escape") close(); });

  // -- controls -----------------------------------------------------------------------
  const set = change => { Object.assign(state, change); render(); };
  document.getElementById("show-all").addEventListener("click",
    () => set({ flagged: false, page: 0 }));
  document.getElementById("show-flagged").addEventListener("click",
    () => set({ flagged: true, page: 0 }));
  select.addEventListener("change", () => set({ decision: select.value, page: 0 }));
  const search = document.getElementById("search");
  search.addEventListener("input",
    () => set({ text: search.value.trim().toLowerCase(), page: 0 }));
  document.getElementById("prev").addEventListener("click", () => set({ page: state.page - 1 }));
  document.getElementById("next").addEventListener("click", () => set({ page: state.page + 1 }));
  render();
})();
"""
