"""Redaction of credential shapes in every channel, in time linear in the text.

The shapes: a URL password with or without a user, ``--password X`` and ``-pPW`` (quoted
too), a quoted ``password="two words"``, a signed URL's ``sig=``, JSON text encoded twice, Azure's
``AccountKey=``, Google ``AIza…``, Hugging Face ``hf_…``, SendGrid ``SG.…``, Stripe
``whsec_…``, an AWS secret key with no context; each is kept out of the audit JSONL, the
``LoggingSink`` log, ``mcp-proxy --audit`` and ``replay -v``. Work is linear: every shape
runs on RE2 (no backtracking), and the CPU time at 160 KB is compared with 10 KB in one run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import toolguard as tg
from tests.mcp_support import TEST_TIMEOUT_S, call, proxy_command, stdio_session, upstream_command
from toolguard.cli import app
from toolguard.hashing import _shapes
from toolguard.hashing._redact import REDACTED, redact, redact_text
from toolguard.hashing._regex import Rewriter, engine

ROOT = Path(__file__).resolve().parents[2]
SECRETS = {
    "cache_url": "redis://:REDISPW6666@cache:6379/0",
    "cmd": "mysql --password PWFLAG8888 -e 'select 1'",
    "cmd2": "mysql -uroot -pMYSQLP9999 db",
    "az": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=AZKEY1818abc==;",
    "maps": "https://maps.googleapis.com/x?key=AIzaSyGOOGLE1717abcdefghijklmnopqrstu",
    "hf": "hf_HUGGINGFACE2020abcdefghijklmnop",
    "sg": "SG.SENDGRID2222abc.defghijklmnopqrstuvwxyz0123456789",
    "wh": "whsec_STRIPEWH2323abcdefgh",
    "aws2": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRET1212",
    "note": "sk-proj-AAAAbbbbCCCCdddd1111", "dsn": "postgres://app:PGPASS5555@db/x",
    "cfg": "password=PWEQ7777",
    "quoted": "mysql -u root -p'QUOTED3131' db", "spaced": 'PGPASSWORD="two SPACED3232" psql',
    "sas": "https://a.blob.core.windows.net/c/b?sv=2020&sig=SASSIG3333abc%2B",
    "twice": json.dumps(json.dumps({"password": "TWICE3434"})),
}
MARKERS = ["REDISPW6666", "PWFLAG8888", "MYSQLP9999", "AZKEY1818", "GOOGLE1717",
           "HUGGINGFACE2020", "SENDGRID2222", "STRIPEWH2323", "CYSECRET1212",
           "AAAAbbbbCCCCdddd1111", "PGPASS5555", "PWEQ7777", "QUOTED3131", "SPACED3232",
           "SASSIG3333", "TWICE3434"]


def _leaked(text: str) -> list[str]:
    return [m for m in MARKERS if m in text]


@tg.mutating
def http(**kwargs: Any) -> str:
    return "200 OK"


def test_no_shape_reaches_the_audit_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    with tg.JsonlSink(path) as sink:
        tg.Guard(tg.load_policy(ROOT / "policies/default.toml", env={}), [http],
                 audit=[sink]).task("t").call("http", SECRETS)
    audit = path.read_text(encoding="utf-8")
    assert _leaked(audit) == []
    assert "maps.googleapis.com" in audit and "AccountName=a" in audit  # the rest stays


def test_no_shape_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    guard = tg.Guard(tools=[http], audit=[tg.LoggingSink()], strict_tools=False)
    with caplog.at_level(logging.INFO, logger="toolguard.audit"):
        task = guard.task("t")
        task.call("http", SECRETS)
        task.call("http", SECRETS)  # cached: the reason quotes nothing either
    shown = caplog.text + "".join(repr(r.__dict__.get("audit")) for r in caplog.records)
    assert caplog.records and _leaked(shown) == []


def test_no_shape_reaches_replay_verbose(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    lines = [{"run": "leak", "effects": {"http": {"effect": "mutating"}}},
             {"tool": "http", "args": SECRETS, "result": "200 OK"},
             {"tool": "http", "args": SECRETS, "result": "200 OK"}]
    trace.write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    result = CliRunner().invoke(app, ["replay", "-v", str(trace)], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    assert REDACTED in result.output and _leaked(result.output) == []


async def test_no_shape_reaches_mcp_proxy_audit(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    command = proxy_command("--audit", str(audit),
                            upstream=upstream_command(tmp_path / "counts.json"))
    body = "\n".join(SECRETS.values())
    with anyio.fail_after(TEST_TIMEOUT_S):
        async with stdio_session(command) as session:
            await call(session, "write_note", {"title": "creds", "body": body})
    text = audit.read_text(encoding="utf-8")
    assert "write_note" in text and _leaked(text) == []


# -- linear time ---------------------------------------------------------------------------------
def test_every_shape_runs_on_a_linear_time_engine() -> None:
    assert engine() == "re2"
    assert all(rewriter._re2 is not None for rewriter, _ in _shapes._shapes())


_HOSTILE: dict[str, Callable[[int], str]] = {
    "eyJ-": lambda n: "eyJ-" * (n // 4),
    "token-": lambda n: "token-" * (n // 6),
    "password=": lambda n: "password=" * (n // 9),
    "://:": lambda n: "a://:" * (n // 5),
    "mysql -p": lambda n: "mysql " * (n // 6),
    "base64 run": lambda n: "Ab1/" * (n // 4),
    "aws key": lambda n: "aws_key='" * (n // 9),
    "PEM": lambda n: "-----BEGIN RSA PRIVATE KEY-----" * (n // 31),
    "AIza": lambda n: "AIza" * (n // 4),
}


def _cpu(text: str) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        redact_text(text)
        best = min(best, time.process_time() - start)
    return best


@pytest.mark.parametrize("shape", sorted(_HOSTILE))
def test_work_grows_linearly_with_the_text(shape: str) -> None:
    """16x the text costs about 16x the work (quadratic would be 256x): CPU time of the
    process, best of 3, both sizes in one run; a floor of 1 ms absorbs the clock's grain."""
    build = _HOSTILE[shape]
    redact_text(build(1000))  # compile the shapes first
    small, large = _cpu(build(10_000)), _cpu(build(160_000))
    assert large <= 64 * max(small, 0.001), (shape, small, large)


# -- a secret anywhere in any text never survives ------------------------------------------------
_ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


def _chars(alphabet: str, size: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=size, max_size=size)


# (text with the secret in place, the secret) for each shape
_SECRET_SHAPES: list[st.SearchStrategy[tuple[str, str]]] = [
    _chars(_ALNUM.upper()[:36], 16).map(lambda s: ("AKIA" + s, "AKIA" + s)),
    _chars(_ALNUM, 36).map(lambda s: ("ghp_" + s, s)),
    _chars(_ALNUM, 34).map(lambda s: ("hf_" + s, s)),
    _chars(_ALNUM + "_-", 35).map(lambda s: ("AIza" + s, s)),
    st.tuples(_chars(_ALNUM, 22), _chars(_ALNUM, 43)).map(
        lambda p: (f"SG.{p[0]}.{p[1]}", p[1])),
    _chars(_ALNUM, 32).map(lambda s: ("whsec_" + s, s)),
    _chars(_ALNUM, 24).map(lambda s: ("sk-" + s, s)),
    _chars(_ALNUM, 20).map(lambda s: ("sk_live_" + s, s)),
    st.tuples(_chars(_ALNUM, 12), _chars(_ALNUM, 16)).map(
        lambda p: (f"eyJ{p[0]}.eyJ{p[1]}.sig", p[1])),
    _chars(_ALNUM, 12).map(lambda s: (f"https://:{s}@host/x", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"postgres://user:{s}@db/app", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"password={s}", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"--password {s}", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"mysql -uroot -p{s} db", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"curl -s -u admin:{s} https://h/x", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"curl --user=admin:{s} https://h/x", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"docker login -u me -p {s} registry.io", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"redis-cli -h cache -a {s} ping", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"openssl enc -aes-256-cbc -k {s} -in f", s)),
    _chars(_ALNUM, 36).map(lambda s: ("npm_" + s, s)),
    _chars(_ALNUM + "_-", 40).map(lambda s: ("ya29." + s, s)),
    _chars("0123456789abcdef", 32).map(
        lambda s: (f"https://{s}@o4501.ingest.sentry.io/42", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"AccountKey={s}==;", s)),
    _chars(_ALNUM, 12).map(lambda s: (f"Authorization: Bearer {s}", s)),
    st.tuples(_chars("ABCDEFGHIJ", 10), _chars("klmnopqrst", 10), _chars("0123456789", 10),
              _chars("/+uvwxyzKL", 10)).map(lambda p: ("".join(p), "".join(p))),
]
_FILLER = st.text(alphabet=st.characters(codec="utf-8"),
                  max_size=60)
_SEPARATORS = st.sampled_from([" ", "\n", "\t", "'", '"', ",", ";", "(", ")", "[", "]", "|",
                               "&", "<", ">", " and then "])


@given(st.one_of(_SECRET_SHAPES), _FILLER, _FILLER, _SEPARATORS, _SEPARATORS)
@settings(max_examples=400, deadline=None)
def test_a_secret_anywhere_in_generated_text_never_survives(
        secret: tuple[str, str], before: str, after: str, left: str, right: str) -> None:
    text, core = secret
    embedded = before + left + text + right + after
    elsewhere = (before + left).count(core) + (right + after).count(core)  # by chance
    assert redact_text(embedded).count(core) <= elsewhere
    shown = redact({"note": embedded, "nested": [{"x": embedded}]}, None, 10**6)
    assert shown["note"].count(core) <= elsewhere
    assert shown["nested"][0]["x"] == shown["note"]


def test_the_rewriter_keeps_offsets_on_any_text() -> None:
    """Matches are found on UTF-8 bytes: text around them, non-ASCII and lone surrogates
    included, comes back as it was."""
    rewriter = Rewriter.compile(r"(k=)([a-z]+)(;)?")
    text = "é k=abc; \ud800 k=xy ü"
    assert rewriter.sub(text, lambda g: f"{g[0]}*{g[2] or ''}") == "é k=*; \ud800 k=* ü"
    assert rewriter.sub("nothing here", lambda g: "!") == "nothing here"
    with pytest.raises(ValueError, match="perl operator"):
        Rewriter.compile(r"(?=lookahead)")


def test_without_re2_the_shapes_still_redact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where google-re2 cannot be imported, the same shapes run on ``re`` (their syntax is
    valid for both)."""
    from toolguard.hashing import _regex

    monkeypatch.setattr(_regex, "_re2", lambda: None)
    _shapes._shapes.cache_clear()
    try:
        text = redact_text("\n".join(SECRETS.values()))
        assert _leaked(text) == [] and all(r._re2 is None for r, _ in _shapes._shapes())
    finally:
        _shapes._shapes.cache_clear()
