"""Tool definitions for the model: the guard's argument schemas in each provider's shape.

:meth:`Guard.tool_schemas` exports the schemas the guard validates with, so the model is
shown exactly what the guard accepts. Shapes (each accepted as-is by that SDK's own type):

- ``openai_chat``: ``{"type": "function", "function": {"name", "description",
  "parameters"[, "strict"]}}`` (``ChatCompletionToolParam``);
- ``openai_responses``: ``{"type": "function", "name", "description", "parameters",
  "strict"}`` (Responses ``FunctionToolParam``);
- ``anthropic``: ``{"name", "description", "input_schema"[, "strict"]}`` (``ToolParam``);
- ``mcp``: ``{"name", "description", "inputSchema"}`` (MCP ``Tool``).

``strict=True`` rewrites each schema for OpenAI's strict mode (Structured Outputs): every
object lists all its properties in ``required`` and forbids others
(``additionalProperties: false``); a property that was optional becomes nullable and loses
its ``default`` (the model sends ``null`` for "not given"; the guard then treats that
``null`` as omitted, so the tool gets its default). A schema that cannot be made strict
(an open object such as ``**kwargs`` or ``dict[str, int]``, a property without a type)
raises ``ValueError`` naming the tool and the place.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any, Literal

__all__ = ["FORMATS", "SchemaFormat", "export_tools", "strict_schema"]

SchemaFormat = Literal["openai_chat", "openai_responses", "anthropic", "mcp"]
FORMATS: tuple[str, ...] = ("openai_chat", "openai_responses", "anthropic", "mcp")

# Keywords whose value is one subschema / a list of them / a map of them.
_ONE = ("items", "not", "additionalItems", "contains", "if", "then", "else")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("$defs", "definitions", "patternProperties", "dependentSchemas")
_TYPED = ("type", "anyOf", "oneOf", "allOf", "$ref", "enum", "const")


def strict_schema(schema: dict[str, Any], tool: str = "tool") -> dict[str, Any]:
    """``schema`` rewritten for OpenAI strict mode (see the module); a new dict.

    Raises:
        ValueError: the schema cannot be made strict without changing what it accepts.
    """
    out = copy.deepcopy(schema)
    _strict(out, tool, "parameters", schema)  # references resolve in the untouched original
    return out


def _inline(node: dict[str, Any], root: dict[str, Any], tool: str, where: str) -> None:
    """A ``$ref`` with sibling keywords (pydantic puts a field's description beside it):
    strict mode takes no siblings, so the definition is inlined (as the Agents SDK does)."""
    ref = node["$ref"]
    target: Any = root
    if not (isinstance(ref, str) and ref.startswith("#/")):
        raise ValueError(f"{tool}: {where} refers to {ref!r}, not to a local definition")
    for part in ref[2:].split("/"):
        target = target.get(part) if isinstance(target, dict) else None
    if not isinstance(target, dict):
        # a bad schema value, not a wrong argument type: ValueError as for the rest
        raise ValueError(f"{tool}: {where} refers to {ref!r}, which does not exist")  # noqa: TRY004
    del node["$ref"]
    for key, value in copy.deepcopy(target).items():
        node.setdefault(key, value)


def _strict(node: Any, tool: str, where: str, root: dict[str, Any],
            inlined: frozenset[str] = frozenset()) -> None:
    if not isinstance(node, dict):
        return
    if "$ref" in node and len(node) > 1:
        ref = node["$ref"]
        if ref in inlined:  # a recursive definition: keep the bare reference
            for key in [k for k in node if k != "$ref"]:
                del node[key]
            return
        _inline(node, root, tool, where)
        inlined = inlined | {ref}
    if node.get("type") == "object" or "properties" in node:
        extra = node.get("additionalProperties")
        # missing: pydantic's nested models and TypedDicts (they ignore extras): closed here
        if extra is True or isinstance(extra, dict) or (
                "properties" not in node and extra is not False):
            raise ValueError(
                f"{tool}: {where} is an open object (undeclared properties allowed: "
                "**kwargs, dict[str, ...]); OpenAI strict mode needs every property named: "
                "give it fixed fields, or export with strict=False")
        properties: dict[str, Any] = node.setdefault("properties", {})
        required = set(node.get("required", ()))
        for name, prop in properties.items():
            if not isinstance(prop, dict) or not any(k in prop for k in _TYPED):
                raise ValueError(f"{tool}: {where}.{name} has no type (a parameter without "
                                 "a type hint?); strict mode needs one")
            _strict(prop, tool, f"{where}.{name}", root, inlined)
            if name not in required:
                properties[name] = _nullable(prop)
        node["required"] = list(properties)
        node["additionalProperties"] = False
    for key in _ONE:
        _strict(node.get(key), tool, f"{where}.{key}", root, inlined)
    for key in _MANY:
        for i, sub in enumerate(node.get(key) or ()):
            _strict(sub, tool, f"{where}.{key}[{i}]", root, inlined)
    for key in _MAP:
        for name, sub in (node.get(key) or {}).items():
            _strict(sub, tool, f"{where}.{key}.{name}", root, inlined)


def _nullable(prop: dict[str, Any]) -> dict[str, Any]:
    """``prop`` accepting ``null`` too, without a ``default`` (strict mode has none)."""
    prop = {k: v for k, v in prop.items() if k != "default"}
    kind = prop.get("type")
    if kind == "null" or (isinstance(kind, list) and "null" in kind):
        return prop
    if isinstance(kind, str) and not ({"enum", "const"} & set(prop)):
        return {**prop, "type": [kind, "null"]}
    for key in ("anyOf", "oneOf"):
        if key in prop and all(isinstance(s, dict) for s in prop[key]):
            if any(s.get("type") == "null" for s in prop[key]):
                return prop
            return {**prop, key: [*prop[key], {"type": "null"}]}
    keep: dict[str, Any] = {k: prop.pop(k) for k in ("description", "title") if k in prop}
    return {**keep, "anyOf": [prop, {"type": "null"}]}


def export_tools(tools: Iterable[tuple[str, str, dict[str, Any]]], fmt: str,
                 strict: bool) -> list[dict[str, Any]]:
    """One definition per ``(name, description, parameters schema)`` in the shape ``fmt``.

    Raises:
        ValueError: an unknown format, or (``strict``) a schema that cannot be strict.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool schema format {fmt!r}: use one of "
                         f"{', '.join(FORMATS)}")
    out = []
    for name, description, schema in tools:
        params = strict_schema(schema, name) if strict else copy.deepcopy(schema)
        if fmt == "openai_chat":
            function: dict[str, Any] = {"name": name, "description": description,
                                        "parameters": params}
            if strict:
                function["strict"] = True
            out.append({"type": "function", "function": function})
        elif fmt == "openai_responses":
            item: dict[str, Any] = {"type": "function", "name": name,
                                    "description": description, "parameters": params,
                                    "strict": strict}
            out.append(item)
        elif fmt == "anthropic":
            tool: dict[str, Any] = {"name": name, "description": description,
                                    "input_schema": params}
            if strict:
                tool["strict"] = True
            out.append(tool)
        else:
            out.append({"name": name, "description": description, "inputSchema": params})
    return out
