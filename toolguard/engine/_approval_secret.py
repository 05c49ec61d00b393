"""The approval secret: what makes an approval in a shared store something only a human can
give, not something anyone who can write to the store (or compute an idempotency key) can.

An approval read from a shared store (Redis) counts only with a *proof*: an HMAC-SHA256
(RFC 2104, ``hmac`` of the standard library) under the approval secret of the task, the key,
the verdict, the hash of the call's arguments and the canonical hash of the arguments the
reviewer was shown: the guard checks it against the arguments of the call about to run, so
arguments rewritten in the store (shown to the reviewer in place of the real ones) make the
approval void. Whoever
writes the approval (``toolguard approve`` at a terminal, or a guard whose approver answered)
signs it; the guard checks the proof before it runs the call. The secret is 32 random bytes in
``$XDG_CONFIG_HOME/toolguard/approval.key`` (``~/.config/toolguard/approval.key``), created on
first use with mode 0600 and refused when others may read it (as ssh refuses a private key).
It never goes through an environment variable, the policy or the store, so an agent's shell
that inherits the proxy's environment (the store URL among it) still cannot sign; an agent
whose shell can read the user's files can, which is why such a shell belongs in a sandbox (see
``docs/security.md``). A memory store needs no proof: only its own process can write it.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from toolguard._errors import ToolGuardError

__all__ = ["ApprovalSecretError", "load_secret", "proof", "secret_path", "valid"]


class ApprovalSecretError(ToolGuardError):
    """The approval secret file cannot be read or created, or others may read it."""


def secret_path() -> Path:
    """``$XDG_CONFIG_HOME/toolguard/approval.key``, else ``~/.config/toolguard/approval.key``."""
    base = os.environ.get("XDG_CONFIG_HOME")
    return (Path(base) if base else Path.home() / ".config") / "toolguard" / "approval.key"


def load_secret(path: Path | None = None) -> bytes:
    """The approval secret, created (32 random bytes, hex, mode 0600) if the file is missing.

    Raises:
        ApprovalSecretError: the file cannot be read or created, is not a regular file, is
            shorter than 32 bytes, or its mode lets the group or others read or write it.
    """
    path = path or secret_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_hex(32) + "\n")
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode):
            raise ApprovalSecretError(f"the approval secret {path} is not a regular file")
        if info.st_mode & 0o077:
            raise ApprovalSecretError(
                f"the approval secret {path} may be read by others (mode "
                f"{stat.S_IMODE(info.st_mode):o}): chmod 600 it, or delete it to make a new one")
        secret = path.read_bytes().strip()
    except OSError as exc:
        raise ApprovalSecretError(f"cannot use the approval secret {path}: "
                                  f"{exc.strerror or exc}") from None
    if len(secret) < 32:
        raise ApprovalSecretError(f"the approval secret {path} is too short (under 32 bytes)")
    return secret


def proof(secret: bytes, key: str, verdict: str, args_hash: str, shown: str) -> str:
    """The HMAC-SHA256 (hex) of one decision: the idempotency ``key`` (which names the task and
    the tool), the ``verdict``, ``args_hash`` (the call's, as the guard hashed it: 32 hex
    digits) and ``shown``, the canonical hash of the arguments the reviewer was shown."""
    message = "\x00".join((key, verdict, args_hash, shown)).encode("utf-8", "surrogatepass")
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def valid(secret: bytes, given: str, key: str, verdict: str, args_hash: str,
          shown: str) -> bool:
    """Whether ``given`` is the proof of this decision (compared in constant time)."""
    return bool(given) and hmac.compare_digest(
        given, proof(secret, key, verdict, args_hash, shown))
