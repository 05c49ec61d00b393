"""MkDocs hook: the policy-keys reference, generated from the JSON Schema the package ships.

A page that holds the line ``<!-- policy-keys -->`` gets it replaced, at build time, by one
table per section of the schema (``toolguard/policy.schema.json``, what ``toolguard schema``
prints), so the reference cannot drift from what the loader accepts.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

MARKER = "<!-- policy-keys -->"
_INT64_MAX = 2**63 - 1


def on_page_markdown(markdown: str, **_: Any) -> str:
    """Replace the marker, if the page has it, with the generated reference."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, policy_keys_markdown())


def policy_keys_markdown() -> str:
    """The reference as Markdown: a table of keys per section, in the schema's order."""
    schema = json.loads(resources.files("toolguard").joinpath("policy.schema.json").read_text())
    defs: dict[str, Any] = schema["$defs"]
    top: list[tuple[str, dict[str, Any]]] = []
    sections: list[str] = []
    for key, prop in schema["properties"].items():
        target = _target(prop, defs)
        if target is None:
            top.append((key, prop))
        else:
            title, inner = target
            sections.append(_section(f"{key}{title}", inner, defs, prop))
    return "\n".join([_section("top level", {"properties": dict(top)}, defs, {}), *sections])


def _target(prop: dict[str, Any], defs: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The object a key opens (its own section), with the suffix its rows are written under."""
    if "$ref" in prop:
        return "", _resolve(prop, defs)
    extra = prop.get("additionalProperties")
    if isinstance(extra, dict) and "$ref" in extra:
        return ".NAME", _resolve(extra, defs)
    return None


def _resolve(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    resolved: dict[str, Any] = defs[prop["$ref"].rsplit("/", 1)[1]]
    return resolved


def _section(path: str, obj: dict[str, Any], defs: dict[str, Any], prop: dict[str, Any]) -> str:
    lines = [f"### `{path}`" if path != "top level" else "### Top level", ""]
    description = obj.get("description") or prop.get("description")
    if description:
        lines += [_escape(description), ""]
    lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    lines += _rows("" if path == "top level" else f"{path}.", obj, defs)
    return "\n".join([*lines, ""])


def _rows(prefix: str, obj: dict[str, Any], defs: dict[str, Any]) -> list[str]:
    rows: list[str] = []
    for key, prop in obj.get("properties", {}).items():
        name = f"{prefix}{key}"
        resolved = _resolve(prop, defs) if "$ref" in prop else prop
        items = resolved.get("items")
        extra = resolved.get("additionalProperties")
        if "properties" in resolved:  # a nested table: its keys, under this one's path
            rows.append(_row(name, resolved, prop))
            rows += _rows(f"{name}.", resolved, defs)
        elif isinstance(extra, dict) and "$ref" in extra:
            rows.append(_row(name, resolved, prop))
            rows += _rows(f"{name}.NAME.", _resolve(extra, defs), defs)
        elif isinstance(items, dict) and "$ref" in items and "properties" in _resolve(items, defs):
            rows.append(_row(name, resolved, prop))
            rows += _rows(f"{name}[].", _resolve(items, defs), defs)
        else:
            rows.append(_row(name, resolved, prop))
    return rows


def _row(name: str, schema: dict[str, Any], prop: dict[str, Any]) -> str:
    default = prop.get("default", schema.get("default", "—"))
    shown = "—" if default == "—" else f"`{_cell(json.dumps(default, ensure_ascii=False))}`"
    description = prop.get("description") or schema.get("description", "")
    return f"| `{name}` | {_type(schema)} | {shown} | {_escape(description)} |"


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " or ".join("none" if v is None else f'`"{v}"`' for v in schema["enum"])
    kind = schema.get("type", "")
    kinds = kind if isinstance(kind, list) else [kind]
    text = " or ".join("none" if k == "null" else k for k in kinds if k)
    if "properties" in schema or "additionalProperties" in schema:
        text = "table"
    items = schema.get("items")
    if isinstance(items, dict):
        text = "array of regexes" if items.get("$ref", "").endswith("/Regex") else (
            "array of tables" if "$ref" in items else f"array of {items.get('type', 'values')}")
    bounds = []
    if "minimum" in schema:
        bounds.append(f"≥ {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema and schema["maximum"] != _INT64_MAX:
        bounds.append(f"≤ {schema['maximum']:g}")
    return text + (f" ({', '.join(bounds)})" if bounds else "")


def _escape(text: str) -> str:
    """Schema prose as one table cell: ``_`` literal too (``__name__`` is no bold)."""
    return _cell(text).replace("_", "\\_")


def _cell(text: str) -> str:
    """Text as one table cell (also inside a code span): ``|`` escaped, one line."""
    return text.replace("|", "\\|").replace("\n", " ")
