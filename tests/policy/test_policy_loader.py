"""Loading valid policies: the schema, merging, provenance, and every shipped policy file."""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from toolguard._errors import PolicyError
from toolguard._types import Effect, IdempotencyScope, Mode
from toolguard.policy._layers import _KeyLines
from toolguard.policy._loader import (
    check_policy_files,
    load_policy,
    load_policy_dict,
    policy_schema,
)
from toolguard.policy._model import (
    ApprovalPolicy,
    ArgOptions,
    AuditPolicy,
    BudgetPolicy,
    IdempotencyPolicy,
    LadderOverride,
    LadderPolicy,
    LadderThresholds,
    Policy,
    StorePolicy,
    ToolPolicy,
    ToolRule,
)

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
VALID = ROOT / "tests" / "fixtures" / "policies" / "valid"
SHIPPED = sorted((ROOT / "policies").glob("*.toml")) + sorted(
    (ROOT / "examples" / "policies").glob("**/*.toml")
)

# $defs name -> the model it describes
MODELS: dict[str, type[BaseModel]] = {
    "BudgetPolicy": BudgetPolicy,
    "LadderThresholds": LadderThresholds,
    "LadderOverride": LadderOverride,
    "LadderPolicy": LadderPolicy,
    "IdempotencyPolicy": IdempotencyPolicy,
    "ApprovalPolicy": ApprovalPolicy,
    "AuditPolicy": AuditPolicy,
    "StorePolicy": StorePolicy,
    "ArgOptions": ArgOptions,
    "ToolRule": ToolRule,
    "ToolPolicy": ToolPolicy,
}


# --- the schema ----------------------------------------------------------------------------


def test_schema_is_package_data_and_a_valid_draft_2020_12_schema() -> None:
    text = (resources.files("toolguard") / "policy.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema == policy_schema()
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_built_in_defaults_validate_against_the_schema() -> None:
    dumped = Policy().model_dump(mode="json", exclude={"sources"})
    errors = list(Draft202012Validator(policy_schema()).iter_errors(dumped))
    assert errors == []


def _shape(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """What a (sub)schema accepts, canonically: JSON types, enum values, bounds, keys."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return _shape({**root["$defs"][name], **siblings}, root)
    if "anyOf" in schema:
        out: dict[str, Any] = {"types": set(), "enum": set()}
        for branch in schema["anyOf"]:
            shape = _shape(branch, root)
            out["types"] |= shape.pop("types")
            out["enum"] |= shape.pop("enum")
            out.update(shape)
        return out
    declared = schema.get("type", [])
    types = {declared} if isinstance(declared, str) else set(declared)
    values = list(schema.get("enum", [])) + ([schema["const"]] if "const" in schema else [])
    names = {str: "string", type(None): "null", int: "integer", bool: "boolean"}
    types |= {names[type(v)] for v in values}
    out = {"types": types, "enum": {v for v in values if v is not None}}
    for bound in ("minimum", "exclusiveMinimum"):
        if bound in schema:
            out[bound] = schema[bound]
    if "properties" in schema:
        out["properties"] = {k: _shape(v, root) for k, v in schema["properties"].items()}
        out["required"] = set(schema.get("required", []))
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        out["values"] = _shape(extra, root)
    elif extra is False:
        out["closed"] = True
    if "items" in schema:
        out["items"] = _shape(schema["items"], root)
    return out


def test_schema_agrees_with_the_models() -> None:
    """Keys, types, enums, bounds and closedness: the file language is the model."""
    ours = policy_schema()
    theirs = Policy.model_json_schema()
    mine = _shape(ours, ours)
    model = _shape(theirs, theirs)
    del mine["properties"]["extends"]  # consumed by the loader
    del model["properties"]["sources"]  # set by the loader
    # A file is an overlay on what it extends: thresholds are required in the model but may be
    # set one at a time in a file (the merged result always has all three).
    for effect in ("readonly", "mutating"):
        assert model["properties"]["ladder"]["properties"][effect].pop("required") == {
            "warn_at",
            "block_at",
            "halt_at",
        }
        assert mine["properties"]["ladder"]["properties"][effect].pop("required") == set()
    assert mine == model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_field_is_a_schema_key_and_vice_versa(name: str) -> None:
    schema = policy_schema()
    assert set(schema["$defs"][name]["properties"]) == set(MODELS[name].model_fields)


def test_top_level_keys_are_the_policy_fields() -> None:
    keys = set(policy_schema()["properties"]) - {"extends"}
    assert keys == set(Policy.model_fields) - {"sources"}


def test_schema_defaults_are_the_model_defaults() -> None:
    schema = policy_schema()
    built_in = Policy().model_dump(mode="json")
    for key, prop in schema["properties"].items():
        if "default" in prop:
            assert prop["default"] == built_in[key], key
    for name, model in MODELS.items():
        for key, prop in schema["$defs"][name]["properties"].items():
            if "default" in prop:
                field = model.model_fields[key]
                default = field.get_default(call_default_factory=True)
                if isinstance(default, BaseModel):
                    default = default.model_dump(mode="json")
                dumped = list(default) if isinstance(default, tuple) else default
                assert prop["default"] == dumped, f"{name}.{key}"


def test_every_schema_property_has_a_description() -> None:
    schema = policy_schema()
    tables = [schema, *schema["$defs"].values()]
    missing = [
        key
        for table in tables
        for key, prop in table.get("properties", {}).items()
        if "description" not in prop and "$ref" not in prop
    ]
    assert missing == []
    assert all("description" in d for d in schema["$defs"].values())


# --- loading -------------------------------------------------------------------------------


def test_full_language_loads() -> None:
    policy = load_policy(VALID / "full.toml", env={})
    assert policy.mode is Mode.ENFORCE
    assert policy.budget.max_tool_calls == 50
    assert policy.budget.timeout_s == 600.0
    assert policy.ladder.readonly == LadderThresholds(warn_at=3, block_at=4, halt_at=5)
    assert policy.idempotency.timeout_exceptions == ("TimeoutError", "httpx.ReadTimeout")
    assert policy.idempotency.in_progress_ttl_s == 900.0
    assert policy.store.backend == "redis"
    send = policy.tools["send_email"]
    assert send.effect is Effect.MUTATING
    assert send.idempotency_scope is IdempotencyScope.TASK
    assert send.ladder == LadderOverride(warn_at=2, block_at=2, halt_at=3)
    assert send.args["request_id"].ignore is True
    assert send.args["path"] == ArgOptions(normalize="path", case="insensitive")
    assert policy.tools["read_output"].max_polls == 20
    assert policy.tools["fs.grep"].effect is Effect.READONLY
    rules = policy.tools["bash"].rules
    assert [r.effect for r in rules] == [Effect.READONLY, Effect.POLL]
    assert rules[0].compiled[0][1].search("  git status")
    assert rules[1].match["command"] == "^\\s*tail\\s+-f\\b"
    assert policy.sources == (str(VALID / "full.toml"),)


def test_extends_merges_tables_and_replaces_arrays() -> None:
    policy = load_policy(VALID / "child.toml", env={})
    assert policy.budget.max_tool_calls == 20  # child wins
    assert policy.budget.max_tokens == 100_000  # inherited from base
    assert policy.ladder.mutating == LadderThresholds(warn_at=2, block_at=3, halt_at=6)
    assert policy.audit.redact == ("cookie",)  # arrays replace
    send = policy.tools["send_email"]
    assert send.max_calls == 1
    assert send.effect is Effect.MUTATING
    assert set(send.args) == {"request_id", "to"}  # tables merge, also under tools
    assert policy.sources == (str(VALID / "base.toml"), str(VALID / "child.toml"))


def test_extends_chain_is_relative_to_each_file() -> None:
    policy = load_policy(VALID / "nested" / "grandchild.toml", env={})
    assert policy.mode is Mode.OBSERVE
    assert policy.budget.max_tool_calls == 20
    assert policy.sources == (
        str(VALID / "base.toml"),
        str(VALID / "child.toml"),
        str(VALID / "nested" / "grandchild.toml"),
    )


def test_relative_paths_are_kept_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(VALID)
    policy = load_policy("nested/grandchild.toml", env={})
    assert policy.sources == ("base.toml", "child.toml", "nested/grandchild.toml")


def test_partial_tables_keep_the_built_in_rest() -> None:
    policy = load_policy(VALID / "partial_ladder.toml", env={})
    assert policy.ladder.readonly == LadderThresholds(warn_at=3, block_at=4, halt_at=8)
    assert policy.ladder.mutating == Policy().ladder.mutating
    assert policy.tools["view_file"].ladder == LadderOverride(warn_at=4)


def test_provenance_of_leaves_tables_and_arrays() -> None:
    base, child = str(VALID / "base.toml"), str(VALID / "child.toml")
    policy = load_policy(VALID / "child.toml", env={})
    assert policy.source_of("budget.max_tool_calls") == child
    assert policy.source_of("budget.max_tokens") == base
    assert policy.source_of("budget.timeout_s") == "built-in"
    assert policy.source_of("ladder.mutating.warn_at") == base
    assert policy.source_of("ladder.mutating") == child  # the last applied beneath it
    assert policy.source_of("ladder.readonly") == "built-in"
    assert policy.source_of("audit.redact") == child
    assert policy.source_of("audit.redact[0]") == child  # inside an array set whole
    assert policy.source_of("tools.send_email.effect") == base
    assert policy.source_of("tools.send_email.args") == child
    assert policy.source_of("tools.nope") == "built-in"
    assert policy.source_of("budget.max") == "built-in"  # a prefix of a key is not its table


def test_a_child_that_breaks_the_ladder_order_is_blamed() -> None:
    data = {"extends": str(VALID / "base.toml"), "ladder": {"mutating": {"block_at": 5}}}
    with pytest.raises(PolicyError) as caught:
        load_policy_dict(data, source="override")
    [problem] = caught.value.problems
    assert (problem.source, problem.path) == ("override", "ladder.mutating.block_at")
    assert problem.message == f"must be ≤ halt_at (4, from {VALID / 'base.toml'})"


def test_load_policy_dict() -> None:
    policy = load_policy_dict({"budget": {"max_tool_calls": 7}, "tools": {"t": {"max_calls": 2}}})
    assert policy.budget.max_tool_calls == 7
    assert policy.tools["t"].max_calls == 2
    assert policy.source_of("budget.max_tool_calls") == "<dict>"
    assert policy.sources == ()


def test_load_policy_dict_reports_every_problem_with_its_source() -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_dict({"mode": "loud", "budget": {"max_tokens": 0}}, source="inline")
    found = {(p.source, p.path, p.message, p.line) for p in caught.value.problems}
    assert found == {
        ("inline", "mode", 'must be one of "enforce", "observe", "off", got "loud"', None),
        ("inline", "budget.max_tokens", "must be an integer ≥ 1, got 0", None),
    }


def test_no_file_means_built_in_defaults() -> None:
    assert load_policy(env={}) == Policy()


def test_policy_error_is_a_value_error_listing_problems() -> None:
    with pytest.raises(ValueError, match=r"budget\.max_tokens: must be an integer ≥ 1, got 0"):
        load_policy_dict({"budget": {"max_tokens": 0}})


def test_check_policy_files() -> None:
    assert check_policy_files([VALID / "full.toml", VALID / "child.toml"]) == []
    bad = ROOT / "tests" / "fixtures" / "policies" / "invalid" / "many_problems.toml"
    problems = check_policy_files([VALID / "full.toml", bad])
    assert len(problems) == 6
    assert {p.source for p in problems} == {str(bad)}


@given(st.integers(min_value=1, max_value=10**12))
def test_any_positive_call_budget_is_accepted(limit: int) -> None:
    policy = load_policy_dict({"budget": {"max_tool_calls": limit}})
    assert policy.budget.max_tool_calls == limit


@given(st.integers(max_value=0))
def test_a_non_positive_call_budget_is_refused(limit: int) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_dict({"budget": {"max_tool_calls": limit}})
    assert [p.message for p in caught.value.problems] == [f"must be an integer ≥ 1, got {limit}"]


# --- positions -----------------------------------------------------------------------------


def test_key_positions_in_toml_text() -> None:
    text = (VALID / "full.toml").read_text(encoding="utf-8")
    lines = _KeyLines(text)
    assert lines.position_of(("mode",)) == (3, 1)
    assert lines.position_of(("budget",)) == (8, 1)
    assert lines.position_of(("budget", "max_tokens")) == (10, 1)
    assert lines.position_of(("tools", "send_email", "ladder", "block_at")) == (54, 25)
    assert lines.position_of(("tools", "send_email", "args", "path", "case")) == (56, 35)
    assert lines.position_of(("tools", "fs.grep", "effect")) == (63, 1)
    assert lines.position_of(("tools", "bash", "rules", 1, "match", "command")) == (70, 11)
    assert lines.position_of(("tools", "bash", "rules", 1, "effect")) == (72, 1)
    assert lines.position_of(("idempotency", "timeout_exceptions", 1)) == (28, 39)
    # an unwritten key falls back to its nearest written parent
    assert lines.position_of(("store", "nope")) == (39, 1)
    assert lines.position_of(("nope",)) is None


def test_key_positions_survive_tricky_strings() -> None:
    text = '''a = """x = 1
[fake]
b = 2"""
c = "say \\"hi\\" = " # a = 1
d = """ends with quotes"""""
e = [ # comment
  "x",
  { f = "}" },
]
"g.h" = 1
'''
    assert tomllib.loads(text)["d"] == 'ends with quotes""'
    lines = _KeyLines(text)
    assert lines.position_of(("c",)) == (4, 1)
    assert lines.position_of(("fake",)) is None
    assert lines.position_of(("d",)) == (5, 1)
    assert lines.position_of(("e", 0)) == (7, 3)
    assert lines.position_of(("e", 1, "f")) == (8, 5)
    assert lines.position_of(("g.h",)) == (10, 1)


# --- every shipped policy ------------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_policy_file_is_valid(path: Path) -> None:
    policy = load_policy(path, env={})
    assert policy.sources[-1] == str(path)


def test_the_shipped_environments() -> None:
    policies = ROOT / "policies"
    for name in ("default", "dev", "prod"):  # editors (taplo) validate them with the schema
        first = (policies / f"{name}.toml").read_text(encoding="utf-8").splitlines()[0]
        assert first == "#:schema ../toolguard/policy.schema.json"
    default = load_policy(policies / "default.toml", env={})
    dev = load_policy(policies / "dev.toml", env={})
    prod = load_policy(policies / "prod.toml", env={})
    assert default.mode is Mode.ENFORCE
    assert default.tools == {}  # strict_tools: naming a tool here would bind every Guard
    assert dev.mode is Mode.OBSERVE
    assert dev.budget == default.budget
    assert prod.default_effect == "deny"
    assert prod.budget == BudgetPolicy(
        max_tool_calls=30, max_tokens=150_000, timeout_s=300, max_consecutive_failures=5
    )
    assert prod.sources == (str(policies / "default.toml"), str(policies / "prod.toml"))
    assert prod.source_of("ladder.mutating") == str(policies / "default.toml")
