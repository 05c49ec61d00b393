"""The credential shapes redaction searches string values for (:mod:`toolguard.hashing._redact`
applies them): each a pattern in RE2 syntax, the group holding the secret, and the needles one
of which a string must hold for the pattern to be searched. The shapes mirror the regex plugins
of Yelp's detect-secrets (see :mod:`toolguard.hashing._redact`); compiled on first use.
May import only the standard library and :mod:`toolguard.hashing._regex`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Final, NamedTuple

from ._regex import Rewriter

_KEYWORDS = (r"pass(?:word|wd|phrase)?|pwd|secret|token|api[_-]?key|access[_-]?key|"
             r"account[_-]?key|private[_-]?key|auth(?:orization)?|cookie|credentials?|"
             r"session[_-]?id")
_SCHEMES: Final = frozenset({"bearer", "basic", "token", "digest"})
_KEYWORD_NEEDLES: Final = ("pass", "pwd", "secret", "token", "key", "auth", "cookie",
                           "credential", "session")
# one shell word as a secret group: quoted whole, quotes and white space inside included
# (-p'S3cr3t', sshpass -p "two words"), or bare up to white space or a quote
_SHELL_WORD: Final = r"""("[^"\n]{1,200}"|'[^'\n]{1,200}'|[^\s'"]{1,200})"""


def _as_written(groups: tuple[str | None, ...]) -> str:
    """A match put back as it was (what a shape's check returns to keep it)."""
    return "".join(g or "" for g in groups)


def _keep_scheme_word(groups: tuple[str | None, ...]) -> str | None:
    """The keyword shape must not take the scheme word of an Authorization header
    (``Authorization: Bearer [REDACTED]``): the shape before it took the credentials."""
    secret, after = groups[1] or "", groups[2]
    if after and secret.lower() in _SCHEMES:
        return _as_written(groups)
    return None


def _aws_secret_only(groups: tuple[str | None, ...]) -> str | None:
    """A run of base64 characters is taken for an AWS secret access key only when it is
    exactly 40 long and mixes upper case, lower case and digits (a git hash, a path or a
    longer blob is not)."""
    run = groups[1] or ""
    if len(run) == 40 and any(c.isupper() for c in run) and any(c.islower() for c in run) \
            and any(c.isdigit() for c in run):
        return None
    return _as_written(groups)


def _keep_scheme_credentials(groups: tuple[str | None, ...]) -> str | None:
    """A quoted value that is an Authorization scheme and its credentials, redacted already
    by the scheme's shape (``"Bearer [REDACTED]"``), stays as that shape wrote it."""
    scheme, _, rest = (groups[1] or "").partition(" ")
    if scheme.lower() in _SCHEMES and rest == "[REDACTED]":
        return _as_written(groups)
    return None


def _generated_only(groups: tuple[str | None, ...]) -> str | None:
    """A bare word after a keyword is taken for a secret only when it mixes letters and
    digits (``Zq8vR2mK7pL4``); a word of prose (``reset``, ``expired``) is kept."""
    word = groups[1] or ""
    if any(c.isdigit() for c in word) and any(c.isalpha() for c in word):
        return None
    return _as_written(groups)


def _cookie_only(groups: tuple[str | None, ...]) -> str | None:
    """curl's ``-b`` takes cookies (``name=value``) or a file to read them from (kept)."""
    if "=" in (groups[1] or ""):
        return None
    return _as_written(groups)


class _Shape(NamedTuple):
    """A credential's shape: its pattern (RE2 syntax), the group holding the secret (the
    groups around it are kept as written), the lower-case texts one of which a string must
    hold for the pattern to be searched at all (empty: always searched), and a check that
    may keep a match as written (returns the text to put back) instead."""

    pattern: str
    group: int
    needles: tuple[str, ...]
    keep: Callable[[tuple[str | None, ...]], str | None] | None = None


_SHAPES_SPEC: Final[tuple[_Shape, ...]] = (
    # PrivateKeyDetector: a PEM private key block, to its END line (or the end of the text)
    _Shape(r"(?s)(-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----)"
           r"(.*?(?:-----END[A-Z0-9 ]{0,40}PRIVATE KEY[A-Z ]{0,10}-----|\z))", 2,
           ("-----begin",)),
    _Shape(r"(?s)(PuTTY-User-Key-File-\d:)(.*)", 2, ("putty-user-key-file",)),
    # an HTTP Authorization scheme: Bearer / Basic / Token / Digest <credentials>
    _Shape(r"(?i)(\b(?:bearer|basic|token|digest)[ \t]+)([A-Za-z0-9._~+/=-]{6,})", 2,
           ("bearer", "basic", "token", "digest")),
    # KeywordDetector-like, a quoted value holding white space, taken whole to its closing
    # quote (RE2 has no back-references: one shape per quote): PGPASSWORD="two words",
    # --password 'a b c', "passphrase": "correct horse battery staple"
    *(_Shape(r"(?i)(\b[\w-]{0,30}(?:" + _KEYWORDS + r")[\w-]{0,30}['\"]?"
             rf"(?:[ \t]*[:=][ \t]*|[ \t]+){q})([^{q}\n]{{0,200}}?[ \t][^{q}\n]{{0,200}}?)({q})",
             2, _KEYWORD_NEEDLES, _keep_scheme_credentials) for q in ('"', "'")),
    # KeywordDetector-like: password=..., X-Api-Key: ..., "token": "...", AccountKey=...,
    # password<TAB>value (tab-separated columns)
    # (quotes escaped too: JSON text inside a JSON string, \"password\": \"...\")
    _Shape(r"(?i)(\b[\w-]{0,30}(?:" + _KEYWORDS + r")[\w-]{0,30}(?:\\*['\"])?"
           r"(?:[ \t]*[:=][ \t]*(?:\\*['\"])?|[ \t]+\\*['\"]|[ ]*\t[ \t]*))"
           r"((?:[^\s'\"&,;\\]|\\[^\s'\"&,;]){3,})([ \t])?",
           2, _KEYWORD_NEEDLES, _keep_scheme_word),
    # a keyword, a space and a bare value that looks generated (letters and digits, 12 or
    # more): netrc's "password X", aws configure set aws_secret_access_key X (prose such
    # as "password reset" or "token expired" is kept: see the check)
    _Shape(r"(?i)(\b[\w-]{0,30}(?:" + _KEYWORDS + r")[\w-]{0,30}[ ]+)"
           r"([A-Za-z0-9/+=_.~-]{12,200})", 2, _KEYWORD_NEEDLES, _generated_only),
    # a command-line flag and its value: --password X, --api-token X, -secret X
    _Shape(r"(?i)((?:^|[^\w-])--?[\w-]{0,30}(?:" + _KEYWORDS + r")[\w-]{0,30}[ \t]+)"
           + _SHELL_WORD, 2, _KEYWORD_NEEDLES),
    # a password glued to -p: mysql -uroot -pSECRET, sshpass -p SECRET
    _Shape(r"(\b(?:mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mysqlpump|"
           r"mariadb[\w-]*|sshpass)\b[^\n;|&]{0,200}?[ \t]-p[ \t]*)" + _SHELL_WORD, 2,
           ("mysql", "mariadb", "sshpass")),
    # a password given by a program's short flag: curl -u user:PASSWORD (and --user,
    # --proxy-user; wget --user is the keyword shape's), docker/podman login -p PASSWORD,
    # redis-cli -a PASSWORD, openssl ... -k PASSWORD
    _Shape(r"(\bcurl\b[^\n;|&]{0,200}?[ \t](?:-u|-U|--user|--proxy-user)(?:[ \t]+|=)?['\"]?"
           r"[^\s:'\"]{0,100}:)([^\s'\"]+)", 2, ("curl",)),
    _Shape(r"(\b(?:docker|podman|nerdctl|buildah|skopeo|helm)\b[^\n;|&]{0,200}?\blogin\b"
           r"[^\n;|&]{0,200}?[ \t]-p[ \t]*)" + _SHELL_WORD, 2, ("login",)),
    _Shape(r"(\b(?:redis-cli|keydb-cli|valkey-cli)\b[^\n;|&]{0,200}?[ \t]-a[ \t]*)"
           + _SHELL_WORD, 2, ("redis-cli", "keydb-cli", "valkey-cli")),
    _Shape(r"(\bopenssl\b[^\n;|&]{0,200}?[ \t]-k[ \t]+)" + _SHELL_WORD, 2, ("openssl",)),
    # curl's cookies: -b / --cookie 'name=value; ...' (a file name, with no "=", is kept)
    _Shape(r"(\bcurl\b[^\n;|&]{0,200}?[ \t](?:-b|--cookie)(?:[ \t]+|=)?)" + _SHELL_WORD, 2,
           ("curl",), _cookie_only),
    # signed URLs: Azure SAS sig=, S3 / GCS X-Amz-Signature= / X-Goog-Signature=
    _Shape(r"(?i)([?&](?:sig|signature|x-amz-signature|x-goog-signature)=)([^&\s'\"#]{8,})",
           2, ("sig=", "signature=")),
    # AWSKeyDetector: a secret access key quoted near "aws ... key"
    _Shape(r"(?i)(aws.{0,20}?(?:key|pwd|pw|password|pass|token).{0,20}?['\"])"
           r"([0-9a-zA-Z/+]{40})(['\"])", 2, ("aws",)),
    # BasicAuthDetector: credentials in a URL (scheme://user:password@host, user optional)
    _Shape(r"(\b[A-Za-z][A-Za-z0-9+.-]{0,20}://[^\s/:@]{0,100}:)([^\s/@]{1,200})(@)", 2,
           ("://",)),
    # AWSKeyDetector: access key ids
    _Shape(r"()\b((?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16})", 2,
           ("a3t", "abia", "acca", "akia", "asia")),
    # GitHubTokenDetector (+ fine-grained tokens), GitLabTokenDetector
    _Shape(r"()\b((?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}|github_pat_[A-Za-z0-9_]{22,})", 2,
           ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_")),
    _Shape(r"()\b(gl(?:pat|dt|rt|cbt|ptt|oas|imt|agent|ft|soat)-[A-Za-z0-9_\-]{20,}"
           r"|GR1348941[A-Za-z0-9_\-]{20,})", 2, ("gl", "gr1348941")),
    # SlackDetector
    _Shape(r"(?i)()\b(xox(?:a|b|p|o|s|r)-(?:\d+-)+[a-z0-9]+)", 2, ("xox",)),
    _Shape(r"(?i)(https://hooks\.slack\.com/services/)(T\w+/B\w+/\w+)", 2,
           ("hooks.slack.com",)),
    # StripeDetector (+ webhook secrets) and sk-… API keys (OpenAI, Anthropic, many others)
    _Shape(r"()\b((?:r|s|p)k_(?:live|test)_[0-9A-Za-z]{8,}|sk-[A-Za-z0-9_\-]{8,}"
           r"|whsec_[0-9A-Za-z]{16,})", 2, ("sk_", "rk_", "pk_", "sk-", "whsec_")),
    # Google API keys and OAuth access tokens, npm tokens, Hugging Face tokens, SendGrid keys
    _Shape(r"()\b(AIza[0-9A-Za-z_\-]{20,}|ya29\.[0-9A-Za-z_\-]{20,})", 2, ("aiza", "ya29.")),
    _Shape(r"()\b(npm_[A-Za-z0-9]{36})", 2, ("npm_",)),
    # a key as a URL's whole user part (Sentry DSNs: https://KEY@o1.ingest.sentry.io/1)
    _Shape(r"(\b[A-Za-z][A-Za-z0-9+.-]{0,20}://)([0-9a-fA-F]{16,128})(@)", 2, ("://",)),
    _Shape(r"()\b(hf_[A-Za-z0-9]{20,}|api_org_[A-Za-z0-9]{20,})", 2, ("hf_", "api_org_")),
    _Shape(r"()\b(SG\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,})", 2, ("sg.",)),
    # JwtTokenDetector
    _Shape(r"()\b(eyJ[A-Za-z0-9_=-]{4,}\.[A-Za-z0-9_=-]{4,}\.?[A-Za-z0-9_.+/=-]*)", 2,
           ("eyj",)),
    # an AWS secret access key with no context: 40 base64 characters, mixed (see the check)
    _Shape(r"()([A-Za-z0-9/+=]{40,})", 2, (), _aws_secret_only),
)


@cache
def _shapes() -> tuple[tuple[Rewriter, _Shape], ...]:
    """The shapes compiled (RE2, linear time whatever the text), on first use."""
    return tuple((Rewriter.compile(shape.pattern), shape) for shape in _SHAPES_SPEC)


# each needle once (several shapes share the keyword needles): sre tries every alternative
# at every position
_ANY_NEEDLE: Final = re.compile("|".join(re.escape(n) for n in sorted(
    {n for shape in _SHAPES_SPEC for n in shape.needles})))
_ALWAYS_FROM: Final = 40  # characters: the shapes with no needle need this many
