"""Turn samples into the report: per-variant medians, within-round ratios, the issue's
targets with PASS/MISS, and Markdown tables.

Ratios are computed per round (both sides measured within the same shuffled round) and then
reduced to their median, which is what survives a noisy machine; they are not ratios of the
medians. ``x tenacity ovh`` is the guard's overhead over the bare call divided by tenacity's:
``(guard - bare) / (tenacity - bare)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from _harness import Variant, median, quartiles

__all__ = ["evaluate_targets", "markdown", "summarise"]

Row = dict[str, Any]


def _per_round(a: Variant, b: Variant, f: Callable[[float, float], float]) -> float:
    values = [f(x, y) for x, y in zip(a.samples_us, b.samples_us, strict=False)]
    return median(values)


def _baseline(by_name: dict[str, Variant], v: Variant, what: str) -> Variant | None:
    t = v.tags
    if t.get("suite") == "redis":
        names = {"bare": f"redis/sync/{t['size']}/bare",
                 "memory": f"memory/sync/{t['size']}/allow/rs"}
        name = names.get(what)
    elif what in ("floor", "orjson"):
        name = f"sync/{t.get('size')}/{what}"
    elif what in ("sketch_min", "sketch_book", "sketch_full"):
        if t.get("mode") != "sync" or t.get("kind") != "guard":
            return None
        path = t.get("path", "")
        path = path if path in ("allow", "cached", "block") else "allow"
        suffix = "/json" if t.get("input") == "json_text" else ""
        name = f"sync/{t.get('size')}/{what}/{path}{suffix}"
    elif what == "warm":  # the first call of a fresh task against the warm allow path
        if t.get("path") != "first":
            return None
        name = f"memory/sync/{t.get('size')}/allow/rs"
    else:
        name = f"{t.get('mode')}/{t.get('size')}/{what}"
    return by_name.get(name) if name else None


def _r(x: float, digits: int = 3) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else round(x, digits)


def summarise(variants: Sequence[Variant]) -> list[Row]:
    """One row per variant: median and quartiles in µs, and the within-round ratios."""
    by_name = {v.name: v for v in variants}
    rows: list[Row] = []
    for v in variants:
        q1, q3 = quartiles(v.samples_us)
        row: Row = {"name": v.name, **v.tags, "batch": v.batch, "rounds": len(v.samples_us),
                    "median_us": _r(median(v.samples_us)), "p25_us": _r(q1), "p75_us": _r(q3)}
        if v.payload_bytes:
            row["payload_bytes"] = v.payload_bytes
            if v.tags.get("kind") in ("hash", "xxh3"):
                row["mb_per_s"] = _r(v.payload_bytes / median(v.samples_us), 1)
        bare = _baseline(by_name, v, "bare")
        if bare is not None and bare is not v:
            row["x_bare"] = _r(_per_round(v, bare, lambda x, y: x / y), 2)
            ten = _baseline(by_name, v, "tenacity")
            if ten is not None and ten is not v:
                values = [(x - b) / (t - b) for x, b, t in
                          zip(v.samples_us, bare.samples_us, ten.samples_us, strict=False)]
                row["x_tenacity_overhead"] = _r(median(values), 3)
        if v.tags.get("input") == "json_text":
            base = _baseline(by_name, v, "bare_json")
            if base is not None:
                row["x_bare_json"] = _r(_per_round(v, base, lambda x, y: x / y), 2)
        for what in ("orjson", "floor", "memory", "sketch_min", "sketch_book", "sketch_full",
                     "warm"):
            base = _baseline(by_name, v, what)
            if base is not None and base is not v and v.tags.get("kind") == "guard":
                row[f"x_{what}"] = _r(_per_round(v, base, lambda x, y: x / y), 2)
        rows.append(row)
    return rows


# -- targets ------------------------------------------------------------------------------------
# The per-call targets, read against the sketches measured in the same rounds:
# (variant, metric, limit).
_TARGETS: list[tuple[str, str, float]] = [
    ("memory/sync/small/allow/rs", "x_sketch_book", 2.0),
    ("memory/sync/small/cached/rs", "x_sketch_book", 2.0),
    ("memory/sync/small/block/rs", "x_sketch_book", 2.0),
    ("memory/sync/medium/allow/rs", "x_sketch_book", 1.5),
    ("memory/sync/small/allow/rs", "x_sketch_full", 1.5),
    ("memory/sync/large/allow/rs", "x_floor", 1.3),
    ("memory/sync/small/first/rs", "x_warm", 2.0),
]


def evaluate_targets(rows: Sequence[Row], redis_trips: Sequence[Row] | None,
                     growth: Row | None = None, imports: Row | None = None) -> list[Row]:
    """Every per-call target with its value and PASS/MISS (Redis round trips, growth and
    import time when those sections ran)."""
    by_name = {row["name"]: row for row in rows}
    out: list[Row] = []

    def add(variant: str, metric: str, value: float | None, limit: float,
            ok: bool | None = None) -> None:
        passed = (value is not None and value <= limit) if ok is None else ok
        out.append({"variant": variant, "metric": metric, "value": value, "limit": limit,
                    "status": "PASS" if passed else "MISS"})

    for name, metric, limit in _TARGETS:
        row = by_name.get(name)
        if row is not None:
            add(name, metric, row.get(metric), limit)
    for effect, scenario in ((growth or {}).get("scenarios") or {}).items():
        last = str((growth or {})["checkpoints"][-1])
        add(f"growth/{effect}", f"#{last} / #10", scenario["ratio_to_first"].get(last), 1.1)
    for case in (imports or {}).get("cases", []):
        add(f"import/{case['name']}", "x python -c pass", case.get("x_bare"), case["limit"])
    for trip in redis_trips or ():
        trip_limit = {"cached": 1.0, "executed": 2.0, "allow": 2.0, "warn": 2.0}.get(
            trip["path"])
        if trip_limit is None:
            continue
        value = trip["commands_per_call"]
        exact = trip["path"] == "cached"
        add(f"redis/{trip['path']}", "round_trips_per_call", value, trip_limit,
            value == trip_limit if exact else value <= trip_limit)
    return out


# -- Markdown -----------------------------------------------------------------------------------
def _f(x: Any, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if abs(x) >= 100:
            return f"{x:,.0f}"
        return f"{x:.{digits}f}"
    return str(x)


def _table(header: Sequence[str], body: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_f(c) for c in r) + " |" for r in body]
    return "\n".join(lines)


def _find(rows: Sequence[Row], **tags: str) -> Row | None:
    for row in rows:
        if all(row.get(k) == v for k, v in tags.items()):
            return row
    return None


def _per_call_tables(rows: Sequence[Row]) -> list[str]:
    parts = []
    for mode in ("sync", "async"):
        schemas = ("off", "rs", "py") if mode == "sync" else ("off", "rs")
        header = ["size", "path"]
        for s in schemas:
            header += [f"{s} µs", f"{s} x bare", f"{s} x ten"]
        header += ["rs x orjson"]
        body = []
        for size in ("small", "medium", "large"):
            for path in ("allow", "allow_new", "cached", "warn", "block", "executed"):
                line: list[Any] = [size, path]
                for s in schemas:
                    row = _find(rows, suite="memory", kind="guard", mode=mode, size=size,
                                path=path, schema=s, input="dict") or {}
                    line += [row.get("median_us"), row.get("x_bare"),
                             row.get("x_tenacity_overhead")]
                rs = _find(rows, suite="memory", kind="guard", mode=mode, size=size, path=path,
                           schema="rs", input="dict") or {}
                line.append(rs.get("x_orjson"))
                body.append(line)
        parts.append(f"**In-memory store, {mode}** (µs per call, median of rounds; x bare and "
                     "x ten = ratio to the bare call and to tenacity's overhead, per round)\n\n"
                     + _table(header, body))
    extra = []
    for size in ("small", "medium", "large"):
        found = _find(rows, suite="memory", kind="guard", mode="sync", size=size, path="allow",
                      schema="rs", input="json_text")
        if found:
            extra.append([size, "allow, args as JSON text", found["median_us"],
                          found.get("x_bare"), found.get("x_bare_json")])
    for schema in ("off", "rs"):
        found = _find(rows, suite="memory", kind="guard", mode="sync", size="medium_nulls",
                      path="allow", schema=schema)
        if found:
            extra.append(["medium_nulls", f"allow, schema {schema}", found["median_us"],
                          found.get("x_bare"), None])
    if extra:
        parts.append(_table(["size", "variant (sync, in-memory)", "µs", "x bare",
                             "x bare from JSON text"], extra))
    return parts


def _baseline_table(rows: Sequence[Row]) -> str:
    body = []
    for mode in ("sync", "async"):
        for size in ("small", "medium", "medium_nulls", "large"):
            def us(what: str, size: str = size, mode: str = mode) -> Any:
                row = _find(rows, suite="memory", kind="baseline", mode=mode, size=size,
                            path=what)
                return None if row is None else row["median_us"]
            bare, ten = us("bare"), us("tenacity")
            if bare is None:
                continue
            ovh = None if ten is None else ten - bare
            sync = mode == "sync"
            body.append([mode, size, bare, us("wraps"), ten, ovh,
                         us("floor") if sync else None, us("orjson") if sync else None,
                         us("bare_json") if sync else None])
    return _table(["mode", "size", "bare", "functools.wraps", "tenacity", "tenacity ovh",
                   "floor (orjson+xxh3)", "orjson sorted dump", "bare from JSON text"], body)


def _sketch_table(rows: Sequence[Row]) -> str:
    """The guard beside the three sketches, per size and path (sync, schema rs)."""
    body = []
    for size in ("small", "medium", "large"):
        for path in ("allow", "cached", "block"):
            for inp in ("dict", "json_text"):
                suffix = "/json" if inp == "json_text" else ""
                lo = _find(rows, name=f"sync/{size}/sketch_min/{path}{suffix}")
                book = _find(rows, name=f"sync/{size}/sketch_book/{path}{suffix}")
                full = _find(rows, name=f"sync/{size}/sketch_full/{path}{suffix}")
                guard = _find(rows, suite="memory", kind="guard", mode="sync", size=size,
                              path=path, schema="rs", input=inp)
                if lo is None or book is None or full is None or guard is None:
                    continue
                body.append([size, path + (" (JSON text)" if suffix else ""),
                             lo["median_us"], book["median_us"], full["median_us"],
                             guard["median_us"], guard.get("x_sketch_min"),
                             guard.get("x_sketch_book"), guard.get("x_sketch_full")])
    return _table(["size", "path", "minimal sketch µs", "bookkeeping sketch µs",
                   "feature sketch µs", "toolguard µs", "x minimal", "x bookkeeping",
                   "x feature"], body)


def _target_table(targets: Sequence[Row]) -> str:
    body = [[t["variant"], t["metric"], t["value"], f"≤ {t['limit']:g}", t["status"]]
            for t in targets]
    return _table(["variant", "metric", "value", "target", ""], body)


def _blocks_table(rows: Sequence[Row]) -> str:
    body = []
    for row in rows:
        if row.get("suite") != "blocks":
            continue
        body.append([row["name"].removeprefix("blocks/"), row.get("payload_bytes"),
                     row["median_us"], row.get("mb_per_s")])
    return _table(["building block", "bytes", "µs", "MB/s"], body)


def _growth_tables(growth: Row, memory: Row) -> list[str]:
    parts = []
    cps = [str(c) for c in growth.get("checkpoints", [])]
    body = []
    for name, sc in growth.get("scenarios", {}).items():
        line: list[Any] = [name]
        line += [sc["per_call_us"][c]["median"] for c in cps]
        line += [sc["ratio_to_first"][c] for c in cps[1:]]
        line.append("yes" if sc["flat"] else "NO")
        body.append(line)
    if body:
        header = ["effect"] + [f"#{c} µs" for c in cps] + [f"#{c}/#{cps[0]}" for c in cps[1:]]
        parts.append(_table([*header, "flat (<= 1.5x)"], body))
    body = []
    for sc in memory.get("scenarios", []):
        last = sc["points"][-1]
        body.append([sc["effect"], sc["max_entries"], last["calls"],
                     f"{sc['bytes_after_all'] / 1e6:.1f} MB", last["bytes_per_call"],
                     last["history"], last["signatures"], last["seen_pairs"],
                     last["idempotency_records"], "yes" if sc["bounded"] else "NO"])
    if body:
        parts.append(_table(["effect", "max_entries", "calls", "held", "B/call", "history",
                             "signatures", "seen pairs", "idem. records", "bounded"], body))
    return parts


def _redis_tables(redis: Row) -> list[str]:
    if "skipped" in redis:
        return [f"Redis: skipped ({redis['skipped']})"]
    parts = []
    rows = redis.get("per_call", [])
    body = []
    for row in rows:
        if row.get("kind") == "guard" and row.get("suite") == "redis":
            body.append([row["size"], row["path"], row["median_us"], row.get("x_memory"),
                         row.get("x_bare")])
    parts.append(_table(["size", "path", "Redis µs", "x in-memory", "x bare"], body))
    body = [[t["path"], ", ".join(t["decisions"]), t["commands_per_call"],
             t["store_round_trips_per_call"]] for t in redis.get("round_trips", [])]
    parts.append(_table(["path", "decisions", "commands/call", "store.round_trips/call"], body))
    body = [[t["store"], t["concurrency"], t["workers"], t["tasks"], t["calls_per_s"]]
            for t in redis.get("throughput", [])]
    parts.append(_table(["store", "workers are", "workers", "tasks", "calls/s"], body))
    return parts


def _imports_table(imports: Row) -> str:
    body = [["python -c pass", imports.get("bare_s"), 1.0, "", ""]]
    body += [[c["name"], c["median_s"], c["x_bare"], f"≤ {c['limit']:g}", ""]
             for c in imports.get("cases", [])]
    loaded = ", ".join(imports.get("loaded_by_import", [])) or "none"
    return (_table(["command (fresh interpreter)", "s", "x python -c pass", "target", ""],
                   body)
            + f"\n\nLoaded by `import toolguard` among the lazy packages: {loaded}.")


def markdown(report: Row) -> str:
    """The human-readable summary of a report."""
    rows = report["per_call"]
    parts = ["### Targets", _target_table(report["targets"]),
             "### Per call", *_per_call_tables(rows),
             "### Against the sketches (sync, jsonschema-rs; ratios per round)",
             _sketch_table(rows),
             "### Baselines (µs per call)", _baseline_table(rows),
             "### Building blocks and hashing throughput", _blocks_table(rows),
             "### Growth and memory", *_growth_tables(report["growth"], report["memory"]),
             "### Start-up", _imports_table(report.get("imports") or {}),
             "### Redis", *_redis_tables(report["redis"])]
    return "\n\n".join(parts) + "\n"
