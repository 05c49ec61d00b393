"""A bad policy is a clear PolicyError, never a traceback.

The three crashes the break-it pass found are regression tests on its own files (in
``../shared/repro/reliability/``); the hypothesis properties mutate every shipped and fixture
policy, as a document and as TOML text, and require a PolicyError or a policy, nothing else.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolguard as tg
from toolguard.cli import app

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted([*ROOT.glob("policies/*.toml"), *ROOT.glob("examples/policies/*.toml"),
                *(ROOT / "tests/fixtures/policies/valid").glob("*.toml")])
DOCUMENTS = [tomllib.loads(path.read_text()) for path in SEEDS]
TEXTS = [path.read_text() for path in SEEDS]


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("TOOLGUARD_ENV", "TOOLGUARD_POLICY", "TOOLGUARD_POLICY_DIR"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


@pytest.mark.parametrize(("name", "expected"), [
    ("check_effect_list.toml",
     ":2:1: tools.view_file.effect: must be one of \"readonly\", \"mutating\", \"poll\", got []"),
    ("check_extends_nul.toml", ":1:1: extends: must be a file path, got a path holding a NUL"),
    ("check_regex_overflow.toml",
     ":2:11: tools.bash.rules[0].match.command: not a valid regular expression: the "
     "repetition number is too large"),
])
def test_the_crashing_policies_are_clear_problems(
        runner: CliRunner, shared: Path, name: str, expected: str) -> None:
    """Regression: these raised TypeError, ValueError and OverflowError out of the loader;
    ``check`` printed a traceback and ``replay`` / ``explain`` exited 1 instead of 2."""
    path = shared / "repro" / "reliability" / name
    checked = runner.invoke(app, ["check", str(path)], env={"COLUMNS": "400"})
    assert (checked.exit_code == 1 and checked.exception is None) or isinstance(
        checked.exception, SystemExit), checked.output
    assert "Traceback" not in checked.output and f"{path}{expected}" in checked.output
    explained = runner.invoke(app, ["explain", str(path), "--tool", "bash"])
    assert explained.exit_code == 2, explained.output
    replayed = runner.invoke(app, ["replay", "--policy", str(path), str(ROOT / "examples" /
                                                                     "traces")])
    assert replayed.exit_code == 2, replayed.output
    with pytest.raises(tg.PolicyError):
        tg.load_policy(path, env={})


# -- the fuzz -------------------------------------------------------------------------------
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**11, max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
    st.sampled_from(["", "\0", "a{99999999999}", "(" * 200, "x" * 5000, "readonly",
                     "mutating", "poll", "deny", "until_change", "task", "off", "redis",
                     "redis://127.0.0.1:6379/0", "../x.toml", "/dev/null", ".", "[", "*",
                     "(?P<a>)(?P<a>)", "[[a]&&b]", "\\", "\ud800"]),
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)
_KEYS = st.sampled_from(["effect", "extends", "ladder", "warn_at", "block_at", "halt_at",
                         "rules", "match", "args", "normalize", "case", "ignore", "tools",
                         "budget", "store", "url", "backend", "redact", "max_value_chars",
                         "idempotency_scope", "timeout_exceptions", "state_ttl_s", "ttl_s",
                         "requires_approval", "external", "max_args_bytes", "mode",
                         "default_effect", "readonly", "mutating", "command", "x"])


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += _paths(value, (*prefix, i))
    return found


@st.composite
def _mutated(draw: st.DrawFn) -> dict[str, Any]:
    doc: Any = draw(st.sampled_from(DOCUMENTS))
    doc = _copy(doc)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(doc)
        path = draw(st.sampled_from(paths))
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "insert"]))
        if not path:
            if isinstance(doc, dict):
                doc[draw(_KEYS)] = draw(_VALUES)
            continue
        last = path[-1]
        if action == "replace":
            parent[last] = draw(_VALUES)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent[last], dict):
            parent[last][draw(_KEYS)] = draw(_VALUES)
        elif isinstance(parent[last], list):
            parent[last].append(draw(_VALUES))
        else:
            parent[last] = draw(_VALUES)
    return doc if isinstance(doc, dict) else {}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _only_policy_errors(load: Any) -> None:
    try:
        policy = load()
    except tg.PolicyError as error:
        problems = error.problems
        text = str(error)
    else:
        assert isinstance(policy, tg.Policy)
        return
    assert "internal error" not in text, text
    assert problems, text


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_a_mutated_policy_document_is_a_policy_or_a_policy_error(doc: dict[str, Any]) -> None:
    _only_policy_errors(lambda: tg.load_policy_dict(doc))


_SNIPPETS = st.sampled_from(["\0", "\ud7ff", "=", "[", "]", "[[", "]]", "{", "}", '"', "'",
                             "'''", '"""', "\n", "#", ",", ".", "a{99999999999}", "= []",
                             "= {}", "= [[]]", "extends = \"\\u0000\"\n", "effect = []\n",
                             "9" * 5000, "\\", "inf", "nan", "1e400", "\t", "\r\n", "\x7f"])


@st.composite
def _mutated_text(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(TEXTS))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(text)))
        cut = draw(st.integers(0, 12))
        insert = draw(st.one_of(_SNIPPETS, st.text(max_size=6)))
        text = text[:at] + insert + text[at + cut:]
    return text


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=_mutated_text())
def test_a_mutated_policy_file_is_a_policy_or_a_policy_error(
        tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzzed.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))
    _only_policy_errors(lambda: tg.load_policy(path, env={}))
