"""Redaction catches the usual key names in any spelling and credentials by their shape, in
every output channel. The shapes are checked against detect-secrets' own
plugins: whatever their patterns generate, no plugin finds anything in what we show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector as RegexBasedPlugin
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import DENYLIST
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.stripe import StripeDetector
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolguard as tg
from toolguard.cli import app
from toolguard.hashing._redact import DEEP, REDACTED, fold_key, redact, redact_text
from toolguard.policy._model import AuditPolicy

ROOT = Path(__file__).resolve().parents[2]
PLANTED = {
    "url": "https://api.example/v1", "apiKey": "sk-live-AAAA1111",
    "headers": {"X-Api-Key": "sk-live-BBBB2222", "Authorization": "Bearer CCCC3333"},
    "passwd": "DDDD4444", "private_key": "-----BEGIN KEY----- EEEE5555",
    "cookie": "session=FFFF6666", "body": json.dumps({"api_key": "sk-live-GGGG7777"}),
    "command": "curl -H 'Authorization: Bearer HHHH8888' https://x",
}
MARKERS = ["AAAA1111", "BBBB2222", "CCCC3333", "DDDD4444", "EEEE5555", "FFFF6666", "GGGG7777",
           "HHHH8888"]


@pytest.mark.parametrize("policy", [tg.Policy(), tg.load_policy(ROOT / "policies/default.toml",
                                                                  env={})])
def test_the_eight_planted_secrets_stay_out_of_the_audit_file(
        tmp_path: Path, policy: tg.Policy) -> None:
    """Regression: 7 of these 8 reached the audit JSONL."""
    path = tmp_path / "audit.jsonl"

    @tg.mutating
    def http_request(**kwargs: Any) -> str:
        return "200 OK"

    with tg.JsonlSink(path) as sink:
        tg.Guard(policy, [http_request], audit=[sink]).task("t").call("http_request", PLANTED)
    audit = path.read_text()
    assert [m for m in MARKERS if m in audit] == []
    body = json.loads(json.loads(audit.splitlines()[0])["args"]["body"])
    assert body == {"api_key": REDACTED}  # the JSON text is redacted inside, still JSON
    assert "https://api.example/v1" in audit  # what is not secret stays


@pytest.mark.parametrize("key", ["apiKey", "X-Api-Key", "API_KEY", "api.key", "Api Key",
                                 "passwd", "PASSWORD", "db_password", "privateKey",
                                 "private-key", "cookie", "Set-Cookie", "clientSecret",
                                 "accessToken", "refresh_token", "aws_access_key_id",
                                 "sessionId", "Authorization", "Proxy-Authorization"])
def test_secret_key_names_in_any_spelling(key: str) -> None:
    assert redact({key: "s3cr3t-value"}, AuditPolicy().redact_pattern, 200) == {key: REDACTED}


@pytest.mark.parametrize("word", DENYLIST)
def test_every_keyword_of_detect_secrets_is_a_secret_key(word: str) -> None:
    for spelled in (word.replace("_?", "_"), word.replace("_?", ""),
                    word.replace("_?", "-").upper()):
        out = redact({spelled: "s3cr3t-value"}, AuditPolicy().redact_pattern, 200)
        assert out == {spelled: REDACTED}, spelled


@pytest.mark.parametrize("key", ["path", "author", "query", "monkey", "keyboard", "url",
                                 "description", "max_results"])
def test_ordinary_keys_are_shown(key: str) -> None:
    assert redact({key: "visible"}, AuditPolicy().redact_pattern, 200) == {key: "visible"}


@pytest.mark.parametrize("key", ["passwort", "mot_de_passe", "db_creds", "pinCode", "otp_code",
                                 "totp", "MFA-Code", "basic_auth", "authHeader"])
def test_secret_key_names_in_other_languages_and_short_forms(key: str) -> None:
    assert redact({key: "s3cr3t-value"}, AuditPolicy().redact_pattern, 200) == {key: REDACTED}


@pytest.mark.parametrize("key", ["mapping", "pinned", "spinner", "footprint", "hotplug",
                                 "author", "authenticated_user"])
def test_words_holding_a_short_secret_word_are_shown(key: str) -> None:
    assert redact({key: "visible"}, AuditPolicy().redact_pattern, 200) == {key: "visible"}


def test_json_text_encoded_twice_is_redacted_inside() -> None:
    body = json.dumps(json.dumps({"password": "hunter22", "user": "me"}))
    out = redact({"body": body}, AuditPolicy().redact_pattern, 500)
    assert "hunter22" not in out["body"]
    assert json.loads(json.loads(out["body"])) == {"password": REDACTED, "user": "me"}


def test_a_user_pattern_is_folded_too() -> None:
    pattern = AuditPolicy(redact=("ssn_last4",)).redact_pattern
    assert redact({"SSN-Last4": "1234", "ssn": "x"}, pattern, 200) == {
        "SSN-Last4": REDACTED, "ssn": "x"}
    assert fold_key("X-Api_Key.Id") == "xapikeyid"


@pytest.mark.parametrize(("text", "kept"), [
    ("curl -H 'Authorization: Bearer abcdef123456' https://x", "Bearer [REDACTED]"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "Basic [REDACTED]"),
    ("export OPENAI_API_KEY=sk-proj-abcdefghijklmnop", "OPENAI_API_KEY=[REDACTED]"),
    ("use sk-ant-api03-abcdefghijklmnopqrstuvwx now", "use [REDACTED] now"),
    ("aws configure set aws_access_key_id AKIAIOSFODNN7EXAMPLE", "[REDACTED]"),
    ("git clone https://ghp_" + "a" * 36 + "@github.com/x", "[REDACTED]"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig-nature", "jwt [REDACTED]"),
    ("-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
     "-----BEGIN RSA PRIVATE KEY-----[REDACTED]"),
    ("psql postgres://admin:hunter2@db:5432/app", "postgres://admin:[REDACTED]@db"),
    ("mysql --password=hunter22 -u root", "--password=[REDACTED]"),
    ("https://api.example/v1?api_key=abc123&x=1", "api_key=[REDACTED]&x=1"),
    ("Cookie: session=FFFF6666", "Cookie: [REDACTED]"),
    ('{"token": "abcdef"}', '"token": "[REDACTED]"'),
    # a quoted value is taken whole, to its closing quote
    ("mysql -u root -p'abcdef123456' db", "-p[REDACTED] db"),
    ('sshpass -p "abc def123456" ssh host', "-p [REDACTED] ssh host"),
    ('PGPASSWORD="hunter2 abc123" psql', 'PGPASSWORD="[REDACTED]" psql'),
    ("deploy --password 'hunter2 abc123' now", "--password [REDACTED] now"),
    ("password\thunter22", "password\t[REDACTED]"),
    ("machine h login me password abc123abc123", "password [REDACTED]"),
    ("aws configure set aws_secret_access_key abc123/abcdefghijklmnop",
     "aws_secret_access_key [REDACTED]"),
    ("curl -b 'session=FFFF6666; lang=en' https://x", "-b [REDACTED] https://x"),
    ("https://a.blob.core.windows.net/c/b?sv=2020&sig=abc123abc123%2B", "&sig=[REDACTED]"),
])
def test_token_shapes_in_values(text: str, kept: str) -> None:
    out = redact_text(text)
    assert kept in out, out
    for secret in ("abcdef123456", "dXNlcjpwYXNzd29yZA", "abcdefghijklmnop", "AKIAIOSFODNN7",
                   "a" * 36, "eyJzdWIi", "MIIEow", "hunter2", "abc123", "FFFF6666",
                   '"abcdef"'):
        assert secret not in out, out


@pytest.mark.parametrize("text", ["ls -la /tmp", "grep -rn 'token' src/", "the basic idea",
                                  "bearer of bad news", "skip-worktree", "git status",
                                  "send the password reset link", "the password was reset",
                                  "curl -b cookies.txt https://x",
                                  'curl -H "Authorization: Bearer [REDACTED]" https://x'])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_text(text) == text


_PLUGINS: list[type[RegexBasedPlugin]] = [
    AWSKeyDetector, GitHubTokenDetector, GitLabTokenDetector, JwtTokenDetector,
    SlackDetector, StripeDetector,
]


@pytest.mark.parametrize("plugin", _PLUGINS, ids=lambda p: p.__name__)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_detect_secrets_finds_nothing_in_what_we_show(
        plugin: type[RegexBasedPlugin], data: st.DataObject) -> None:
    """The library's own patterns generate the secrets; its own plugin is the judge."""
    detector = plugin()
    pattern = data.draw(st.sampled_from(list(detector.denylist)))
    secret = data.draw(st.from_regex(pattern, fullmatch=True).filter(
        lambda s: s.isprintable() and s.isascii() and " " not in s and len(s) < 2000))
    if not list(detector.analyze_string(secret)):
        return  # a generated string the plugin itself does not report (its own filters)
    shown = redact_text(f"curl -s {secret} https://x")
    assert list(detector.analyze_string(shown)) == [], shown


@pytest.mark.parametrize("header", [p.pattern for p in PrivateKeyDetector.denylist])
def test_every_private_key_header_of_detect_secrets(header: str) -> None:
    block = f"-----{header}-----\nQUJDREVGR0g=\n-----END-----" if "PuTTY" not in header else (
        f"{header}: ssh-rsa\nQUJDREVGR0g=")
    assert "QUJDREVGR0g" not in redact_text(block)


def test_basic_auth_shapes_of_detect_secrets() -> None:
    detector = BasicAuthDetector()
    for url in ("https://user:pa55word@example.com/x", "ftp://a:b123@host"):
        assert list(detector.analyze_string(url))
        assert list(detector.analyze_string(redact_text(url))) == []


def test_nesting_beyond_the_limit_is_cut_not_recursed() -> None:
    """Regression: depth ≥ 600 raised ToolGuardError (RecursionError inside redaction)."""
    deep: dict[str, Any] = {"leaf": 1}
    for _ in range(5_000):
        deep = {"a": deep}
    out = redact({"value": deep}, AuditPolicy().redact_pattern, 200)
    level = out["value"]
    depth = 0
    while isinstance(level, dict):
        level, depth = level["a"], depth + 1
    assert level == DEEP and depth < 100


def test_replay_verbose_shows_redacted_arguments(shared: Path) -> None:
    """Regression: ``replay -v`` printed the api_key of a recorded call."""
    trace = shared / "repro" / "reliability" / "replay_verbose_leaks_secret.jsonl"
    result = CliRunner().invoke(app, ["replay", "-v", str(trace)], env={"COLUMNS": "300"})
    assert result.exit_code == 0, result.output
    assert "sk-live-1234567890abcdef" not in result.output
    assert '"api_key": "[REDACTED]"' in result.output


def test_every_channel_redacts_alike(clock: tg.testing.FakeClock) -> None:
    """Audit event, halt exception and validation message show the same redaction."""
    events: list[tg.AuditEvent] = []
    secret = "sk-live-ZZZZ9999"

    @tg.readonly
    def fetch(url: str, command: str) -> str:
        return "ok"

    task = tg.Guard(tools=[fetch], audit=[events.append], clock=clock).task("t")
    args = {"url": "u", "command": f"curl -H 'X-Api-Key: {secret}'"}
    for _ in range(4):
        task.call("fetch", args)
    with pytest.raises(tg.Halt) as info:
        task.call("fetch", args)
    other = tg.Guard(tools=[fetch], audit=[events.append], clock=clock).task("t2")
    invalid = other.call("fetch", {"url": 1, "command": f"Bearer {secret}"})
    shown = [repr(e) for e in events] + [str(info.value), repr(info.value.args),
                                          str(invalid.content), invalid.reason]
    assert all(secret not in text for text in shown)
    assert events[0].args == info.value.args


def test_a_validation_message_never_quotes_a_secret_it_points_at() -> None:
    """The value under a secret key, and a secret inside a quoted value, are redacted in the
    message the model reads; the rest of the message stays."""

    @tg.readonly
    def login(user: str, password: str, headers: list[str]) -> str:
        return "ok"

    task = tg.Guard(tools=[login]).task("t")
    result = task.call("login", {"user": "ann", "password": 31415926535,
                                 "headers": [{"token": "tok-live-2718281828"}, "ok"]})
    assert result.decision is tg.Decision.INVALID
    message = str(result.content)
    assert "31415926535" not in message and "tok-live-2718281828" not in message
    assert "args.password: [REDACTED] is not of type 'string'" in message
    assert "args.headers[0]: {'token': [REDACTED]" in message
