"""``toolguard hook HOST``: guard a coding agent through its hook protocol, one process per
hook event (Claude Code, Codex CLI and Gemini CLI run a command per event).

Each event arrives as JSON on stdin; the answer goes to stdout in the host's protocol
(:mod:`toolguard.hooks._hosts`), with the host's documented exit code. The task is the host's
session: its id is the task id, so every process of one session shares the ladder counts,
the idempotency records and the halted flag through the store (by default the per-user
SQLite file; the policy's ``[store]`` may name another).

- before a tool call: :meth:`Task.begin`. A call that must not run is denied with the
  guard's text as the reason the model reads; a warn runs with the notice as context for the
  model; a call that needs approval is handed to the host's own permission prompt (``ask``),
  or, where the host has none (Codex CLI, Gemini CLI), denied, with the ``toolguard approve``
  command that approves it in this store shown to the user alone (``systemMessage``); a
  halt stops the agent, with the reason on stderr for the user. The begun call is kept as
  JSON in the state directory (``pending/``), found again by the session and the host's tool
  call id.
- after it: the real result, a failure, or an unknown outcome (a command interrupted part
  way: :meth:`Host.outcome <toolguard.hooks._hosts.Host.outcome>`) is recorded on that
  pending call, so progress, stagnation and the idempotency record follow what actually
  happened.
- a user prompt or a session start: a new turn; a user prompt also resumes a halted session
  (the user's message is what lifts a halt). The end of the session records every call still
  pending as an unknown outcome.

Failures (malformed input, an unknown event, a missing session id, an unreadable policy or
store) print one line on stderr and exit with the code the host documents for "block" when
the policy fails closed (the default: a guard that cannot decide blocks), else for "error,
do not block". Never a traceback.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._hosts import Answer, Event, HookError

if TYPE_CHECKING:
    from toolguard.engine._engine import Guard, Task
    from toolguard.engine._pending import PendingCall
    from toolguard.policy._model import Policy
    from toolguard.stores import Store

    from ._hosts import Host

__all__ = ["Answer", "Event", "HookError", "main", "state_dir"]

# -- where state lives --------------------------------------------------------------------
def state_dir(env: Mapping[str, str] | None = None) -> Path:
    """The per-user state directory: the directory of the SQLite store's default file
    (:func:`toolguard.stores.sqlite.default_path`: ``$TOOLGUARD_STATE_DIR``, else
    ``$XDG_STATE_HOME/toolguard``, else ``~/.local/state/toolguard``)."""
    from toolguard.stores.sqlite import default_path

    return default_path(None if env is None else dict(env)).parent


def _slug(text: str) -> str:
    """A file name for an id the host chose (any text): readable when it is plain, hashed
    when it is not."""
    if text and len(text) <= 100 and all(c.isalnum() or c in "-_." for c in text) \
            and not text.startswith("."):
        return text
    return "h-" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _write_json(path: Path, data: Any) -> None:
    """Write ``data`` to ``path`` atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data, ensure_ascii=False, default=str), "utf-8")
    temporary.replace(path)


# -- the guard of one hook process -----------------------------------------------------------
def policy_path(host: Host, given: str | None, env: Mapping[str, str]) -> Path:
    """The policy file: ``--policy`` (a file, or the name of a shipped policy), else
    ``TOOLGUARD_POLICY``, else the shipped policy named after the host (``claude-code``,
    ``codex``, ``gemini``: :mod:`toolguard.policy._shipped`)."""
    from toolguard.policy._shipped import is_policy_name, shipped_policy

    chosen = given or env.get("TOOLGUARD_POLICY") or host.name
    shipped = shipped_policy(chosen) if is_policy_name(chosen) else None
    return shipped if shipped is not None else Path(chosen)


def build_guard(host: Host, given: str | None, env: Mapping[str, str]) -> Guard:
    """The guard for one event: the policy file with the environment's ``TOOLGUARD_*``
    overrides, tools known by name (the host runs them), and the store the policy names, or
    the per-user SQLite file when it names none.

    Raises:
        HookError: the policy or the store cannot be used.
    """
    from toolguard._errors import PolicyError
    from toolguard.engine._engine import Guard
    from toolguard.policy._loader import load_policy

    path = policy_path(host, given, env)
    try:
        policy = load_policy(path, env=env)
    except PolicyError as exc:
        first = exc.problems[0] if exc.problems else None
        where = (f"{first.path}: {first.message}" if first and first.path
                 else first.message if first else str(exc))
        more = f", and {len(exc.problems) - 1} more" if len(exc.problems) > 1 else ""
        raise HookError(f"the policy {path} cannot be used ({where}{more})") from None
    except OSError as exc:
        raise HookError(f"cannot read the policy {path}: {exc.strerror or exc}") from None
    closed = policy.store.on_error == "fail_closed"
    try:
        store = (_default_store(policy, env) if policy.source_of("store.backend") == "built-in"
                 and not policy.store.url else None)
        return Guard(policy, store=store, strict_tools=False)
    except Exception as exc:  # noqa: BLE001 - a store URL, a Redis that is down: one line
        raise HookError(f"cannot open the store ({type(exc).__name__}: {exc}); the store "
                        f"fails {policy.store.on_error.replace('_', ' ')}",
                        closed) from None


_GUARDS: dict[tuple[Any, ...], Guard] = {}
_CWD_LOCK = threading.Lock()


@contextlib.contextmanager
def working_directory(cwd: str | None) -> Iterator[None]:
    """Run the body in ``cwd`` (None: where the process is), so that a relative
    ``--policy``, ``TOOLGUARD_POLICY``, ``TOOLGUARD_POLICY_DIR``, ``TOOLGUARD_STATE_DIR`` or
    ``sqlite:///`` URL resolves as in the hook command itself. The working directory is the
    whole process's: the hook server's threads take turns here, and answer the rest of an
    event with the absolute paths resolved in it.

    Raises:
        HookError: ``cwd`` cannot be entered.
    """
    if cwd is None:
        yield
        return
    with _CWD_LOCK:
        before = Path.cwd()
        try:
            os.chdir(cwd)
        except OSError as exc:
            raise HookError(f"cannot enter the hook command's working directory {cwd}: "
                            f"{exc.strerror or exc}") from None
        try:
            yield
        finally:
            os.chdir(before)


def cached_guard(host: Host, given: str | None, env: Mapping[str, str]) -> Guard:
    """:func:`build_guard`, kept for the life of the process (the hook server's) under the
    working directory, the policy file, its modification time and the ``TOOLGUARD_*``
    variables: a changed file is read again, and the same relative names in another
    directory are other files."""
    path = policy_path(host, given, env)
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        mtime = None  # build_guard says why it cannot be read
    key = (host.name, str(Path.cwd()), str(path.absolute()), mtime, str(state_dir(env)),
           tuple(sorted((k, v) for k, v in env.items() if k.startswith("TOOLGUARD_"))))
    guard = _GUARDS.get(key)
    if guard is None:
        guard = build_guard(host, given, env)
        if mtime is not None:
            if len(_GUARDS) >= 16:  # bounded: policies edited over a long session
                _GUARDS.clear()
            _GUARDS[key] = guard
    return guard


def _default_store(policy: Policy, env: Mapping[str, str]) -> Store:
    """The per-user SQLite store (the processes of one machine share it)."""
    from toolguard.stores.sqlite import SQLiteStore, default_path

    return SQLiteStore(default_path(dict(env)), timeout_s=policy.store.timeout_s,
                       state_ttl_s=policy.store.state_ttl_s, on_error=policy.store.on_error)


# -- one event -----------------------------------------------------------------------------
class Session:
    """The guard's task for one host session and where its begun calls wait for their
    outcome: in ``kept`` (a dict of :class:`PendingCall` by call id, for a host that runs in
    this process: the Claude Agent SDK), else as JSON files beside the store
    (``pending/SESSION/CALL.json``, for hosts that run a process per event). The halted
    flag's note for ``toolguard status`` is ``halted/SESSION.json``."""

    def __init__(self, guard: Guard, host: Host, event: Event, root: Path | None,
                 kept: dict[str, PendingCall] | None = None) -> None:
        self.guard = guard
        self.host = host
        self.event = event
        self.task_id = f"{host.name}:{event.session}"
        self.task: Task = guard.task(self.task_id)
        self.root = root  # None: no files (a host in this process keeps ``kept``)
        self.kept = kept
        self.pending_dir = (root or Path()) / "pending" / _slug(self.task_id)

    def _call_key(self, event: Event) -> str:
        if event.call_id:
            return event.call_id
        from toolguard.hashing._canonical import (
            args_hash,  # the host gives no id: the arguments stand in
        )

        try:
            return f"{event.tool}-{args_hash(event.args if isinstance(event.args, dict) else {})}"
        except Exception:  # noqa: BLE001 - arguments with no canonical form
            return f"{event.tool}-{hashlib.sha256(repr(event.args).encode()).hexdigest()[:32]}"

    def keep(self, event: Event, pending: PendingCall) -> None:
        """Keep a begun call until the host reports its outcome.

        Raises:
            HookError: the state directory cannot be written.
        """
        key = self._call_key(event)
        if self.kept is not None:
            self.kept[f"{self.task_id}\n{key}"] = pending
            return
        state = {**pending.detach(), "task": self.task_id}  # "task": for toolguard status
        path = self.pending_dir / f"{_slug(key)}.json"
        try:
            _write_json(path, state)
        except OSError as exc:
            raise HookError(f"cannot keep the pending call in {self.pending_dir}: "
                            f"{exc.strerror or exc}") from None

    def take(self, event: Event) -> PendingCall | None:
        """The begun call this event reports on (None: none was kept, e.g. the hook was
        installed after it began).

        Raises:
            HookError: its file cannot be read.
        """
        key = self._call_key(event)
        if self.kept is not None:
            return self.kept.pop(f"{self.task_id}\n{key}", None)
        from toolguard.engine._pending import attach

        path = self.pending_dir / f"{_slug(key)}.json"
        try:
            state = json.loads(path.read_text("utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot read the pending call {path}: {exc}",
                            closed=False) from None
        path.unlink(missing_ok=True)
        return attach(self.task, state)  # None: the policy changed; the claim turns unknown

    def halted_note(self) -> Path:
        return (self.root or Path()) / "halted" / f"{_slug(self.task_id)}.json"

    def note_halt(self, reason: str) -> None:
        if self.root is None:
            return
        with contextlib.suppress(OSError):
            _write_json(self.halted_note(), {
                "host": self.host.name, "session": self.event.session, "task": self.task_id,
                "cwd": self.event.cwd, "reason": reason, "at": time.time()})

    def clear_halt(self) -> None:
        if self.root is None:
            return
        with contextlib.suppress(OSError):
            self.halted_note().unlink(missing_ok=True)

    def sweep(self, older_than_s: float | None) -> None:
        """Record the begun calls of this session that the host never reported (older than
        ``older_than_s`` seconds; ``None``: all) as unknown outcomes."""
        if self.kept is not None:
            prefix = f"{self.task_id}\n"
            for key in [k for k in self.kept if k.startswith(prefix)]:
                if older_than_s is None or self.kept[key].age_s >= older_than_s:
                    with contextlib.suppress(Exception):
                        self.kept.pop(key).unknown("the host never reported how it ended")
            return
        from toolguard.engine._pending import attach

        try:
            files = list(self.pending_dir.iterdir())
        except OSError:
            return
        now = time.time()
        for path in files:
            try:
                state = json.loads(path.read_text("utf-8"))
                if older_than_s is not None and now - state["began_at"] < older_than_s:
                    continue
                path.unlink(missing_ok=True)
                pending = attach(self.task, state)
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if pending is not None:
                with contextlib.suppress(Exception):
                    pending.unknown("the host never reported how the call ended")


def handle(session: Session, event: Event) -> Answer:
    """Apply one event to the session's task and say what the host should do."""
    from toolguard._errors import Halt

    try:
        if event.kind == "pre":
            return _before(session, event)
        if event.kind in ("post", "failed", "unknown"):
            return _after(session, event)
        if event.kind in ("prompt", "start"):
            return _turn(session, event)
        if event.kind == "end":
            session.sweep(None)
        return Answer()
    except Halt as halt:
        first = session.guard._store.usage(session.task_id).halted
        reason = halt_reason(halt, first if halt.reason.startswith("task is halted (") else None)
        session.note_halt(reason)
        return Answer(halt=reason, halted=halt)


def halt_reason(halt: Any, first: Mapping[str, Any] | None = None) -> str:
    """The stop reason of a halt: the tool, its redacted arguments, why, and how to go on;
    ``first``: the halt the session is in already (the store's record of it), if this call
    only met it."""
    args = json.dumps(halt.args, ensure_ascii=False, default=str, sort_keys=True)
    if len(args) > 300:
        args = args[:299] + "…"
    then = (" Send a message to continue (it resumes the session), or run `toolguard resume "
            f"{halt.task_id}`.")
    if first is not None:
        return (f"toolguard: the session is halted ({first.get('reason', 'halted')}); "
                f"{halt.tool} {args} was not run.{then}")
    return f"toolguard halted the agent at {halt.tool} {args}: {halt.reason}.{then}"


def _before(session: Session, event: Event) -> Answer:
    from toolguard._types import REVIEW
    from toolguard.engine._approval import approve, defer

    task = session.task
    ttl = session.guard._config.policy.idempotency.in_progress_ttl_s
    session.sweep(ttl)
    asked: list[str] = []

    def host_prompt(request: Any) -> Any:
        asked.append(request.reason)
        if session.host.asks:
            # the host's own permission prompt asks the user: the call runs only if they agree
            return approve()
        # no prompt to hand it to: the call waits in the store for `toolguard approve`
        return defer("")

    pending: PendingCall = task.begin(event.tool, event.args, approver=host_prompt)
    result = pending.result
    if result is not None and result.decision is REVIEW and not session.host.asks:
        # the command goes to the user alone: a model whose shell can give a command a
        # terminal (Codex's exec_command with tty) could otherwise answer its prompt
        command = approve_command(session, result.idempotency_key)
        return Answer(deny=f"{_text(result.content)} The user has been shown how to approve "
                           "it; ask them, or go on without it.",
                      note=f"toolguard: {result.tool} waits for your approval. At a terminal, "
                           f"run: {command}")
    if result is not None:
        return Answer(deny=_text(result.content))
    session.keep(event, pending)
    context = pending.notice if session.host.context_before else None
    if asked:
        return Answer(ask=f"toolguard: {pending.tool} needs approval: {asked[0]}",
                      context=context)
    return Answer(context=context)


def approve_command(session: Session, key: str) -> str:
    """The shell command that approves the call waiting under ``key``, in the store the
    hook uses: a SQLite file named by its URL (``TOOLGUARD_STORE__URL``, as
    ``toolguard approve`` reads it); any other store through the hook's policy file (never
    its URL, which may hold a password)."""
    import shlex

    from toolguard.stores.sqlite import SQLiteStore

    store = session.guard.store
    if isinstance(store, SQLiteStore):
        return sqlite_approve_command(store.path, key)
    policy = session.guard._config.policy
    words = ["toolguard", "approve", *(["--policy", str(policy.sources[-1])]
                                       if policy.sources else []), key]
    where = policy.source_of("store.url")
    return shlex.join(words) + (f" (with the agent's {where[4:]})"
                                if where.startswith("env ") else "")


def sqlite_approve_command(path: Path, key: str) -> str:
    """The shell command that approves the call waiting under ``key`` in the SQLite file
    ``path`` (absolute), named by its URL as ``toolguard approve`` reads it."""
    import shlex

    url = f"sqlite:///{path}"  # an absolute path: sqlite:////...
    return f"TOOLGUARD_STORE__URL={shlex.quote(url)} toolguard approve {shlex.quote(key)}"


def _after(session: Session, event: Event) -> Answer:
    pending = session.take(event)
    if pending is None:
        return Answer()
    if event.kind == "failed":
        result = pending.fail(ToolFailed(_text(event.result)))
    elif event.kind == "unknown":
        result = pending.unknown(_text(event.result))
    else:
        result = pending.finish(event.result)
    if result.notice and (result.notice != pending.notice  # earned by this result
                          or not session.host.context_before):
        return Answer(context=result.notice)
    return Answer()


def _turn(session: Session, event: Event) -> Answer:
    task = session.task
    if event.kind == "prompt" and task.halted:
        task.resume()
        session.clear_halt()
        return Answer(note="toolguard: the halted session goes on with your message")
    task.new_turn()
    return Answer()


class ToolFailed(Exception):
    """The host reported that the tool failed, with this text."""


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


# -- the command -----------------------------------------------------------------------------
def main(argv: list[str], stdin: Any = None, stdout: Any = None, stderr: Any = None,
         env: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
    """``toolguard hook HOST [--policy FILE]``: answer one event; returns the exit code.
    ``cwd``: the hook command's working directory, when another process answers for it
    (the hook server; None: this process's own)."""
    from ._hosts import HOSTS

    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    environ = os.environ if env is None else env
    usage = f"usage: toolguard hook {{{','.join(HOSTS)}}} [--policy FILE]"
    if not argv or argv[0] not in HOSTS:
        stderr.write(f"toolguard: {usage}\n")
        return 2
    host = HOSTS[argv[0]]
    given: str | None = None
    rest = argv[1:]
    if rest[:1] == ["--policy"] and len(rest) == 2:
        given = rest[1]
    elif rest:
        stderr.write(f"toolguard: {usage}\n")
        return host.exit_block
    event: Event | None = None
    try:
        event = host.parse(stdin.read())
        with working_directory(cwd):
            guard = cached_guard(host, given, environ)
            root = state_dir(environ).absolute()
        answer = handle(Session(guard, host, event, root), event)
    except HookError as exc:
        return _failed(host, event, str(exc), exc.closed, stderr)
    except Exception as exc:  # noqa: BLE001 - a bug or a store failure: one line, no traceback
        from toolguard._errors import StoreError

        closed = not (isinstance(exc, StoreError) and "fail_open" in str(exc))
        return _failed(host, event, f"{type(exc).__name__}: {exc}", closed, stderr)
    if answer.halt:
        stderr.write(f"{answer.halt}\n")
    if answer.note:
        stderr.write(f"{answer.note}\n")
    out = host.render(event, answer)
    if out is not None:
        stdout.write(json.dumps(out, ensure_ascii=False))
        stdout.write("\n")
    return 0


def _failed(host: Host, event: Event | None, message: str, closed: bool, stderr: Any) -> int:
    """One line on stderr and the host's exit code: "block" for a tool call when the guard
    fails closed, else "error, do not block"."""
    blocking = closed and (event is None or event.kind == "pre")
    what = "the call is blocked" if blocking else "the agent goes on"
    stderr.write(f"toolguard: {message} ({what})\n")
    return host.exit_block if blocking else host.exit_error
