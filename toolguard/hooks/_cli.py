"""The coding-agent commands: ``toolguard hook HOST`` (one hook event), ``toolguard install /
uninstall HOST [--user | --project] [--dry-run]`` (the hook configuration in the host's
settings file), ``toolguard status`` (halted sessions) and ``toolguard resume SESSION``.

``install`` merges one matcher group per event into the settings file's ``hooks``, each
running the hook command (:mod:`toolguard._hook_client`) with this interpreter; it keeps a
copy of the file as it was (``FILE.toolguard-backup``), changes nothing when the groups are
there already, and ``--dry-run`` prints the change as a diff. ``uninstall`` removes those
groups (recognised by their command) and the lists and table they leave empty, nothing else.
"""

from __future__ import annotations

import difflib
import json
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from toolguard._errors import StoreError
from toolguard.commands._common import fail

from ._hook import state_dir
from ._hosts import HOSTS, Host

__all__ = ["install_hooks", "install_toml_hooks", "register", "uninstall_hooks",
           "uninstall_toml_hooks"]

CLIENT = Path(__file__).parent.parent / "_hook_client.py"
MARK = "_hook_client.py"  # how install recognises its own hook commands


def hook_command(host: Host, policy: Path | None) -> str:
    """The command line a host runs for each event."""
    words = [sys.executable, str(CLIENT), host.name]
    if policy is not None:
        words += ["--policy", str(policy.absolute())]
    return shlex.join(words)


def _ours(group: Any) -> bool:
    hooks = group.get("hooks") if isinstance(group, dict) else None
    return isinstance(hooks, list) and bool(hooks) and all(
        isinstance(h, dict) and MARK in str(h.get("command", "")) for h in hooks)


def _read(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text("utf-8") or "{}")
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read {path}: {exc}; it was left as it is") from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise ValueError(  # noqa: TRY004 - bad input, reported as the other read errors
            f"{path} is not a settings object with a \"hooks\" table; it was left as it is")
    return data


def install_hooks(host: Host, path: Path, policy: Path | None) -> tuple[str, str]:
    """The settings file's text before and after adding the hook groups (the same text when
    they are there already).

    Raises:
        ValueError: the file is not a JSON settings object.
    """
    data = _read(path)
    before = json.dumps(data, indent=2, ensure_ascii=False) + "\n" if data else ""
    hooks = data.setdefault("hooks", {})
    command = hook_command(host, policy)
    for event in host.events:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ValueError(  # noqa: TRY004 - bad input, reported as the other read errors
                f"{path}: hooks.{event} is not a list; it was left as it is")
        groups[:] = [g for g in groups if not _ours(g)]  # an older command: replaced
        group: dict[str, Any] = {"hooks": [{"type": "command", "command": command,
                                            "timeout": host.timeout}]}
        if event in host.tool_events and host.matcher is not None:
            group = {"matcher": host.matcher, **group}
        groups.append(group)
    return before, json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def uninstall_hooks(path: Path) -> tuple[str, str]:
    """The settings file's text before and after removing the hook groups install added.

    Raises:
        ValueError: the file is not a JSON settings object.
    """
    data = _read(path)
    before = json.dumps(data, indent=2, ensure_ascii=False) + "\n" if data else ""
    hooks = data.get("hooks")
    if isinstance(hooks, dict):
        for event in list(hooks):
            groups = hooks[event]
            if isinstance(groups, list) and any(_ours(g) for g in groups):
                groups[:] = [g for g in groups if not _ours(g)]
                if not groups:
                    del hooks[event]
        if not hooks:
            del data["hooks"]
    return before, json.dumps(data, indent=2, ensure_ascii=False) + "\n"


BEGIN = "# >>> toolguard hooks (toolguard install; toolguard uninstall removes this block)"
END = "# <<< toolguard hooks"


def install_toml_hooks(host: Host, path: Path, policy: Path | None) -> tuple[str, str]:
    """A TOML settings file's text (Codex CLI's ``config.toml``) before and after adding
    the hook tables, as one block between two marker comments (the same text when the
    block is there already).

    Raises:
        ValueError: the file is not valid TOML, or would not be with the block.
    """
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

    before = path.read_text("utf-8") if path.exists() else ""
    kept, _ = _without_block(before)
    command = json.dumps(hook_command(host, policy))  # a TOML basic string is JSON's
    lines = [BEGIN]
    for event in host.events:
        lines += [f"[[hooks.{event}]]"]
        if event in host.tool_events and host.matcher is not None:
            lines += [f"matcher = {json.dumps(host.matcher)}"]
        lines += [f"[[hooks.{event}.hooks]]", 'type = "command"', f"command = {command}",
                  f"timeout = {host.timeout}", ""]
    lines[-1] = END
    after = (kept.rstrip("\n") + "\n\n" if kept.strip() else "") + "\n".join(lines) + "\n"
    try:
        tomllib.loads(before)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"cannot read {path}: {exc}; it was left as it is") from None
    try:
        tomllib.loads(after)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} defines its hooks in a way the hook tables cannot be added "
                         f"to ({exc}); it was left as it is") from None
    return before, after


def _without_block(text: str) -> tuple[str, bool]:
    """``text`` without the block install added, and whether it had one."""
    start = text.find(BEGIN)
    end = text.find(END, start)
    if start < 0 or end < 0:
        return text, False
    rest = text[end + len(END):].lstrip("\n")
    head = text[:start].rstrip("\n")
    return (head + "\n" + (("\n" + rest) if rest else "") if head else rest), True


def uninstall_toml_hooks(path: Path) -> tuple[str, str]:
    """A TOML settings file's text before and after removing the block install added."""
    before = path.read_text("utf-8")
    after, _ = _without_block(before)
    return before, after


def _apply(path: Path, before: str, after: str, dry_run: bool) -> None:
    if before == after:
        typer.echo(f"{path}: unchanged")
        return
    if dry_run:
        typer.echo("".join(difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            str(path), f"{path} (after)")), nl=False)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        shutil.copy2(path, path.with_name(path.name + ".toolguard-backup"))
    temporary = path.with_name(f".{path.name}.toolguard-tmp")
    temporary.write_text(after, "utf-8")
    temporary.replace(path)
    typer.echo(f"{path}: updated")


def _host(name: str) -> Host:
    host = HOSTS.get(name)
    if host is None:
        fail(f"unknown host {name!r} (one of: {', '.join(HOSTS)})")
    return host


def _age(seconds: float) -> str:
    """``42 s``, ``7 min``, ``3 h``."""
    if seconds < 120:
        return f"{max(seconds, 0):.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def _waiting_approvals(path: Path) -> None:
    """Print the calls waiting for approval in the hook's SQLite file ``path`` (if there is
    one), each with the command that approves it."""
    if not path.is_file():
        return
    from toolguard.stores.sqlite import SQLiteStore

    from ._hook import sqlite_approve_command

    store = SQLiteStore(path)
    try:
        waiting = store.waiting_approvals()
    except StoreError as exc:
        typer.echo(f"toolguard: cannot list the calls waiting for approval: {exc}", err=True)
        return
    finally:
        store.close()
    now = time.time()
    for task, key, record in waiting:
        typer.echo(f"waiting {record.tool}  session {task}  "
                   f"{_age(now - record.requested_at)} ago, for your approval")
        typer.echo(f"        {sqlite_approve_command(path.absolute(), key)}")


# The arguments and options `hook`, `install` and `uninstall` share.
_HostArg = Annotated[str, typer.Argument(help=f"the host: {', '.join(HOSTS)}")]
_UserOpt = Annotated[bool, typer.Option("--user", help="the user's settings file")]
_ProjectOpt = Annotated[bool, typer.Option(
    "--project", help="the project's settings file (the default)")]
_DirOpt = Annotated[Path, typer.Option("--dir", help="the project directory")]
_DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="print the change only")]


def register(app: typer.Typer) -> None:
    """Add the coding-agent commands to ``app``."""

    @app.command()
    def hook(
        host: _HostArg,
        policy: Annotated[Path | None, typer.Option(
            help="a policy file or a shipped policy's name (default: TOOLGUARD_POLICY, "
                 "else the shipped policy named after the host)")] = None,
    ) -> None:
        """Answer one hook event of a coding agent (JSON on stdin), in its hook protocol.

        The hosts run the same answer through a lighter client (what ``toolguard install``
        writes); this command is for trying a hook by hand."""
        from ._hook import main

        raise typer.Exit(main([host, *(["--policy", str(policy)] if policy else [])]))

    @app.command()
    def install(
        host: _HostArg,
        user: _UserOpt = False,
        project: _ProjectOpt = False,
        directory: _DirOpt = Path(),
        policy: Annotated[Path | None, typer.Option(
            help="a policy file (default: the shipped policy named after the host)")] = None,
        dry_run: _DryRunOpt = False,
    ) -> None:
        """Put the guard into a coding agent's hooks (merged, idempotent, backed up)."""
        chosen = _host(host)
        if user and project:
            fail("give --user or --project, not both")
        if policy is not None and not policy.is_file():
            fail(f"no policy file {policy}")
        path = chosen.settings_path("user" if user else "project", directory, Path.home())
        try:
            if path.suffix == ".toml":
                before, after = install_toml_hooks(chosen, path, policy)
            else:
                before, after = install_hooks(chosen, path, policy)
        except ValueError as exc:
            fail(str(exc))
        _apply(path, before, after, dry_run)

    @app.command()
    def uninstall(
        host: _HostArg,
        user: _UserOpt = False,
        project: _ProjectOpt = False,
        directory: _DirOpt = Path(),
        dry_run: _DryRunOpt = False,
    ) -> None:
        """Remove exactly the hooks `toolguard install` added."""
        chosen = _host(host)
        if user and project:
            fail("give --user or --project, not both")
        path = chosen.settings_path("user" if user else "project", directory, Path.home())
        if not path.exists():
            typer.echo(f"{path}: unchanged")
            return
        try:
            before, after = (uninstall_toml_hooks(path) if path.suffix == ".toml"
                             else uninstall_hooks(path))
        except ValueError as exc:
            fail(str(exc))
        _apply(path, before, after, dry_run)

    @app.command()
    def status() -> None:
        """List the coding-agent sessions the guard halted, calls waiting for your approval
        (with the command that approves each), and calls waiting to be reported."""
        root = state_dir()
        notes = sorted((root / "halted").glob("*.json")) if (root / "halted").is_dir() else []
        if not notes:
            typer.echo("no halted session")
        for note in notes:
            try:
                data = json.loads(note.read_text("utf-8"))
                line = f"halted  {data['host']}  session {data['session']}  ({data['cwd']})"
                reason = str(data["reason"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else "not a note the hook wrote"
                typer.echo(f"toolguard: skipped {note}: {why}", err=True)
                continue
            typer.echo(line)
            typer.echo(f"        {reason}")
        _waiting_approvals(root / "state.db")
        pending = root / "pending"
        shown = 0
        for path in sorted(pending.glob("*/*.json")) if pending.is_dir() else []:
            try:
                state = json.loads(path.read_text("utf-8"))
                tool, age = str(state["tool"]), time.time() - float(state["began_at"])
            except (OSError, ValueError, KeyError, TypeError):
                continue  # reported meanwhile (the file went), or not the hook's
            task = str(state.get("task", path.parent.name))
            typer.echo(f"begun   {tool}  session {task}  "
                       f"{_age(age)} ago, not reported yet")
            shown += 1
        if shown:
            typer.echo("        a call the host never reports counts as an unknown outcome "
                       "(never as not run) at the session's next tool call after "
                       "idempotency.in_progress_ttl_s, or when the session ends")

    @app.command()
    def resume(
        task_id: Annotated[str, typer.Argument(
            metavar="TASK", help="the task id: a coding agent's session id (or HOST:SESSION)")],
        host: Annotated[str | None, typer.Option(
            help="the coding agent whose session it is [default: claude-code]")] = None,
        policy: Annotated[Path | None, typer.Option(
            help="the policy file (a coding agent's: the hook's)")] = None,
        env: Annotated[str | None, typer.Option(
            help="the environment whose store holds the task")] = None,
    ) -> None:
        """Lift the halt of a task, as a new user message would: a coding agent's session in
        the hook's state (with --host, HOST:SESSION, or when no shared store is configured),
        else the task in the shared store the policy and environment select (Redis or
        SQLite, as `toolguard approve`)."""
        session = task_id
        if ":" in session and session.split(":", 1)[0] in HOSTS:
            host, session = session.split(":", 1)
        if not session.strip():
            fail(f"no session id in {task_id!r}: give the session's id (toolguard status "
                 "lists the halted ones)")
        try:
            if host is None and (env is not None or _shared_store_named(policy, env)):
                _resume_shared(task_id, policy, env)
            else:
                _resume_session(_host(host or "claude-code"), session, policy)
        except (StoreError, OSError, ValueError) as exc:
            fail(f"cannot resume {task_id}: {exc}")


def _resume_shared(task_id: str, policy: Path | None, env: str | None) -> None:
    """Lift the halt of a task in the shared store the policy and environment select.

    Raises:
        StoreError: the store cannot be read or written.
    """
    from toolguard.commands._common import shared_store_guard

    task = shared_store_guard(policy, env).task(task_id)
    if not task.halted:
        typer.echo(f"task {task_id} is not halted")
        return
    task.resume()
    typer.echo(f"task {task_id} resumed")


def _resume_session(host: Host, session: str, policy: Path | None) -> None:
    """Lift the halt of a coding agent's session in the hook's state.

    Raises:
        StoreError: the store cannot be read or written.
    """
    import os

    from ._hook import Event, HookError, Session, build_guard

    try:
        guard = build_guard(host, str(policy) if policy else None, os.environ)
    except HookError as exc:
        fail(str(exc))
    state = Session(guard, host, Event("prompt", session), state_dir())
    if not state.task.halted:
        state.clear_halt()
        typer.echo(f"session {session} is not halted")
        return
    state.task.resume()
    state.clear_halt()
    typer.echo(f"session {session} resumed")


def _shared_store_named(policy: Path | None, env: str | None) -> bool:
    """Whether the policy or the environment (``TOOLGUARD_STORE__*``) names a store other
    processes share: then ``resume TASK`` means a task in that store."""
    import os

    if any(key.startswith("TOOLGUARD_STORE__") for key in os.environ):
        return True
    if policy is None:
        return False
    from toolguard.commands._common import load_cli_policy

    store = load_cli_policy(policy, env).store
    return store.backend != "memory" or store.url is not None
