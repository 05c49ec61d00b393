"""Policy regexes run in linear time (``toolguard.hashing._regex``): ``rules`` ``match``
patterns and ``result.ignore`` are compiled by RE2, and what RE2 cannot run is a policy problem.

Regression (newcomer pass): ``^(a+)+$`` passed ``toolguard check`` and a guarded call with a
31-character argument stalled for seconds in Python's backtracking ``re``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolguard as tg
from toolguard.cli import app
from toolguard.hashing import _regex
from toolguard.hashing._normalize import normalizer_for
from toolguard.policy._model import ResultPolicy

ROOT = Path(__file__).resolve().parents[2]

EVIL = r"^(a+)+$"


def test_a_catastrophic_pattern_does_not_stall_a_guarded_call(tmp_path: Path) -> None:
    """The call completes: under backtracking ``re`` a 40-character argument takes hours
    (2**40 steps), so a hung child is killed at the timeout and the test fails."""
    policy = tmp_path / "evil.toml"
    policy.write_text(textwrap.dedent(f"""\
        [[tools.echo.rules]]
        match = {{ text = '{EVIL}' }}
        effect = "readonly"

        [tools.echo.result]
        ignore = ['(x+x+)+y']
        """))
    assert _decision_in_a_child(policy, "@tg.mutating", f'{{"text": "{"a" * 40}!"}}') == "allow"


def _decision_in_a_child(policy: Path, decorator: str, args: str) -> str:
    """The decision of one call of an ``echo`` tool under ``policy``, made in a child
    process that is killed after 120 s (a backtracking stall fails the test, not the run)."""
    script = textwrap.dedent(f"""\
        import toolguard as tg

        {decorator}
        def echo(**kwargs: str) -> str:
            return "x" * 40

        guard = tg.Guard(policy=tg.load_policy({str(policy)!r}), tools=[echo])
        with guard.task("t") as task:
            print(task.call("echo", {args!r}).decision)
        """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_catastrophic_redact_pattern_does_not_stall_a_call(tmp_path: Path) -> None:
    """``audit.redact`` patterns are searched in every argument's key name, which the model
    writes: they run on RE2 too (under ``re``, this key takes hours)."""
    policy = tmp_path / "evil.toml"
    policy.write_text(f"[audit]\nredact = ['{EVIL}']\n")
    args = f'{{"{"a" * 40}!": "v", "aaa": "secret"}}'
    assert _decision_in_a_child(policy, "@tg.readonly", args) == "allow"


def test_redact_keeps_matching_keys_case_insensitively_and_folded() -> None:
    from toolguard.hashing._redact import redact
    from toolguard.policy._model import AuditPolicy

    pattern = AuditPolicy(redact=("api_key", "^(a+)+$", "(?i)Session")).redact_pattern
    out = redact({"apiKey": "k", "X-API-KEY": "k", "aaaa": "v", "aaab": "w", "SESSION": "s"},
                 pattern, 200)
    assert out == {"apiKey": "[REDACTED]", "X-API-KEY": "[REDACTED]", "aaaa": "[REDACTED]",
                   "aaab": "w", "SESSION": "[REDACTED]"}


def test_inline_flags_of_each_pattern_stay_its_own(tmp_path: Path) -> None:
    """Regression: the patterns of a list were joined into one Python regex, where an inline
    flag is an error unless at the very start: ``ignore = ['(?i)foo']`` passed ``check`` and
    then failed the first call."""
    policy = tmp_path / "flags.toml"
    policy.write_text('[audit]\nredact = ["(?i)token"]\n'
                      '[tools.x.result]\nignore = ["(?i)foo", "bar"]\n')
    loaded = tg.load_policy(policy, env={})
    result = loaded.tools["x"].result
    assert result is not None
    assert normalizer_for(result)("FOO Bar bar foo") == " Bar  "
    assert loaded.audit.redact_pattern is not None
    assert loaded.audit.redact_pattern.search("X-TOKEN")


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a)\1", "uses a backreference \\1, which the linear-time regex engine (RE2)"),
    (r"(?P<n>a)(?P=n)", "uses a named backreference (?P=name)"),
    (r"foo(?=bar)", "uses a lookahead (?=...)"),
    (r"foo(?!bar)", "uses a negative lookahead (?!...)"),
    (r"(?<=x)y", "uses a lookbehind (?<=...)"),
    (r"(?<!x)y", "uses a negative lookbehind (?<!...)"),
    (r"a{1001}", "not a valid regular expression: invalid repetition size: {1001}"),
    (r"^(git status", "not a valid regular expression: missing ), unterminated subpattern"),
    (r"(?>ab)c", "uses an atomic group (?>...), which the linear-time regex engine (RE2) does "
                 "not support; rewrite the pattern without it"),
    (r"a++", "uses a possessive quantifier (++)"),
    (r"(?x) a b", "uses verbose mode (?x)"),
])
def test_check_names_file_key_path_and_reason(tmp_path: Path, pattern: str,
                                              reason: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(textwrap.dedent(f"""\
        [[tools.bash.rules]]
        match = {{ command = {json.dumps(pattern)} }}
        effect = "readonly"

        [tools.get.result]
        ignore = [{json.dumps(pattern)}]

        [audit]
        redact = [{json.dumps(pattern)}]
        """))
    result = CliRunner().invoke(app, ["check", str(path)], env={"COLUMNS": "400"})
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert f"{path}:2:11: tools.bash.rules[0].match.command: {reason}" in result.output
    assert f"{path}:6:11: tools.get.result.ignore[0]: {reason}" in result.output
    assert f"{path}:9:11: audit.redact[0]: {reason}" in result.output
    with pytest.raises(tg.PolicyError, match=re.escape(reason)):
        tg.load_policy(path, env={})


def test_the_schema_rejects_lookaround_and_backreferences() -> None:
    """Editors validate with the shipped schema alone: it refuses what RE2 cannot run."""
    from jsonschema import Draft202012Validator

    from toolguard.policy._loader import policy_schema

    validator = Draft202012Validator(policy_schema())
    for pattern in (r"foo(?=bar)", r"(?<!x)y", r"(a)\1", r"(?P<n>a)(?P=n)"):
        document = {"tools": {"bash": {"rules": [{"match": {"command": pattern},
                                                  "effect": "readonly"}],
                                       "result": {"ignore": [pattern]}}},
                    "audit": {"redact": [pattern]}}
        paths = sorted(".".join(map(str, e.absolute_path))
                       for e in validator.iter_errors(document))
        assert paths == ["audit.redact.0", "tools.bash.result.ignore.0",
                         "tools.bash.rules.0.match.command"]
    for pattern in (r"\\1 literal", r"^\s*(ls|cat)\b[^;&|<>`$\n]*$", r"\(?=x"):
        document = {"tools": {"bash": {"rules": [{"match": {"command": pattern},
                                                  "effect": "readonly"}]}}}
        assert list(validator.iter_errors(document)) == [], pattern


def test_the_schema_message_is_the_engines_reason(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[[tools.x.rules]]\nmatch = { a = "(?=b)" }\neffect = "readonly"\n')
    with pytest.raises(tg.PolicyError) as caught:
        tg.load_policy(path, env={})
    assert [(p.path, p.message.split(",")[0]) for p in caught.value.problems] == [
        ("tools.x.rules[0].match.a", "uses a lookahead (?=...)")]


# --- the meaning is Python's for the syntax the shipped policies use ----------------------------

SHIPPED = sorted({*(ROOT / "policies").glob("*.toml"),
                  *(ROOT / "examples/policies").glob("*.toml")})
PATTERNS = [
    r"^\s*(ls|cat|grep|rg|head|tail|git (status|diff|log))\b[^;&|<>`$\n]*$",  # README, default
    r"^view$", r"attempt #\d+", r"seq=\d+", r"^a{,3}$", r"x\Z", r"(?i)^GET\s+/api/v\d+",
    r"\bid=[0-9a-f]{8}\b", r"^(?:foo|bar)+$", r"[\]$]+$", r"(?m)^ok$",
    r"[[:alpha:]]+", r"[]a]", r"(?a)\d+", r"(?u)^ls", r"\u0069d", r"\N{DIGIT ZERO}",
]
TEXTS = st.text(alphabet=st.sampled_from("lscatgrep viewattmpt#0123456789id=abcf$;|&\n\t ]xGET/"),
                max_size=40)


def _python(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Python's own reading of ``pattern`` (``[[:alpha:]]`` warns that it may change)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return re.compile(pattern, flags)


def test_every_shipped_policy_still_loads() -> None:
    for path in SHIPPED:
        policy = tg.load_policy(path, env={})
        for tool in policy.tools.values():
            for rule in tool.rules:
                assert all(isinstance(p, _regex.PolicyRegex) for _, p in rule.compiled)


@settings(max_examples=300)
@given(text=TEXTS)
def test_rule_search_agrees_with_python_re_on_ascii(text: str) -> None:
    for pattern in PATTERNS:
        assert _regex.compile_pattern(pattern).search(text) == bool(
            _python(pattern).search(text)), (pattern, text)


@settings(max_examples=300)
@given(text=TEXTS)
def test_ignore_removes_what_python_re_removes(text: str) -> None:
    for pattern in PATTERNS:
        expected = _python(pattern, re.MULTILINE).sub("", text)
        assert _regex.compile_pattern(pattern, multiline=True).remove(text) == expected


def test_the_shipped_rules_classify_the_recorded_commands_as_before(shared: Path) -> None:
    """Every shell command of the real coding-agent runs gets the same answer from each
    shipped rule pattern under RE2 as under Python's ``re``."""
    commands: list[str] = []
    for path in sorted((shared / "data" / "swe-trajectories").rglob("*")):
        if path.is_file():
            commands += re.findall(r'"(?:command|cmd|action)":\s*"((?:[^"\\]|\\.)*)"',
                                   path.read_text(errors="replace"))
    assert len(commands) > 1000
    for pattern in PATTERNS[:2]:
        compiled = _regex.compile_pattern(pattern)
        for raw in commands:
            text = json.loads(f'"{raw}"')
            assert compiled.search(text) == bool(re.search(pattern, text)), (pattern, text)


def test_normalizer_ignore_uses_the_linear_engine() -> None:
    normalize = normalizer_for(ResultPolicy(strip_volatile=False, ignore=(r"(x+x+)+y",)))
    assert normalize("ok " + "x" * 40) == "ok " + "x" * 40
    assert normalize("a xxy b") == "a  b"
    assert normalize("lone \ud800 surrogate xxy") == "lone \ud800 surrogate "


def test_known_differences_are_ascii_classes() -> None:
    """Documented in ``toolguard.hashing._regex``: ``\\d`` and ``\\s`` are ASCII."""
    assert not _regex.compile_pattern(r"^\d$").search("٣")
    assert not _regex.compile_pattern(r"^\s$").search("\u00a0")


def test_the_fallback_refuses_nested_repetition() -> None:
    """Without google-re2, Python's ``re`` runs the patterns and refuses the catastrophic
    shapes instead."""
    for pattern in (EVIL, r"(a*)*b", r"(a|aa)+$", r"(x+x+)+y", r"(a{1,3})+"):
        assert "repetition inside a repetition" in (_regex._python_problem(pattern) or "")
    for pattern in PATTERNS:  # an alternation inside a repetition is refused too: conservative
        refused = pattern == r"^(?:foo|bar)+$"
        assert (_regex._python_problem(pattern) is not None) == refused, pattern
    assert "backreference" in (_regex._python_problem(r"(a)\1") or "")
    assert "lookaround" in (_regex._python_problem(r"a(?=b)") or "")


def test_import_toolguard_does_not_load_re2() -> None:
    code = "import sys, toolguard; print('re2' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "False"


@settings(max_examples=200)
@given(text=st.text(alphabet=st.sampled_from("xé€😀a\n "), max_size=30))
def test_removal_with_empty_matches_keeps_characters_whole(text: str) -> None:
    """Empty matches advance one character, not one byte, on the UTF-8 text."""
    for pattern in (r"x*", r"(?:é|x)*", r"a?", r"^"):
        assert _regex.compile_pattern(pattern, multiline=True).remove(text) == re.sub(
            pattern, "", text, flags=re.MULTILINE), pattern


def test_without_google_re2_python_re_runs_the_patterns(monkeypatch: pytest.MonkeyPatch,
                                                       tmp_path: Path) -> None:
    """The fallback where google-re2 cannot be imported: the same API on ``re``, and the
    loader refuses the catastrophic shapes (and what RE2 would refuse too)."""
    monkeypatch.setattr(_regex, "_re2", lambda: None)
    assert _regex.engine() == "re"
    rule = _regex.compile_pattern(PATTERNS[0])
    assert rule.search("ls -la\n") and not rule.search("ls; rm -rf /")
    ignore = _regex.compile_patterns([r"(?i)foo", r"seq=\d+"], multiline=True)
    assert ignore.remove("FOO seq=12 bar") == "  bar"
    redact = _regex.compile_patterns(["token"], ignore_case=True)
    assert redact.search("X-TOKEN")
    path = tmp_path / "evil.toml"
    path.write_text(f"[[tools.x.rules]]\nmatch = {{ a = '{EVIL}' }}\neffect = 'readonly'\n")
    with pytest.raises(tg.PolicyError, match="repetition inside a repetition"):
        tg.load_policy(path, env={})


def test_a_policy_with_compiled_patterns_still_pickles() -> None:
    """RE2 objects do not pickle; a policy whose rule, ignore and redact patterns have been
    used must (as it did on ``re``), for a worker process that gets it."""
    import pickle

    from toolguard.hashing._normalize import normalizer_for

    policy = tg.load_policy(ROOT / "examples" / "policies" / "openhands.toml", env={})
    [rule] = [r for t in policy.tools.values() for r in t.rules]
    assert rule.compiled[0][1].search("view")
    assert policy.audit.redact_pattern is not None
    assert policy.audit.redact_pattern.search("X-API_KEY")
    back = pickle.loads(pickle.dumps(policy))
    [again] = [r for t in back.tools.values() for r in t.rules]
    assert again.compiled[0][1].search("view") and not again.compiled[0][1].search("views")
    assert back.audit.redact_pattern is not None
    assert back.audit.redact_pattern.search("apiKey")
    ignore = normalizer_for(ResultPolicy(ignore=(r"(?i)seq=\d+",))).ignore
    assert ignore is not None
    assert pickle.loads(pickle.dumps(ignore)).remove("a SEQ=3\nb") == "a \nb"
