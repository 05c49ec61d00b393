"""What the CLI commands share: loading the policy a command reads (exit 2 listing every
problem), and reporting a usage error. Imported by ``cli`` and by the command modules it
registers (``mcp._proxy``), which do not import each other."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from toolguard._errors import PolicyError

if TYPE_CHECKING:
    from rich.console import Console

    from toolguard.engine._engine import Guard
    from toolguard.policy._model import Policy

__all__ = ["BAD_INPUT", "EnvOption", "PolicyOption", "fail", "load_cli_policy",
           "read_cli_policy", "shared_store_guard", "stderr_console"]

BAD_INPUT = 2

# the options of a command that reads one policy (mcp-proxy, approve)
PolicyOption = Annotated[
    Path | None, typer.Option("--policy", help="A policy file (TOML) or a shipped policy's name.")]
EnvOption = Annotated[
    str | None, typer.Option("--env", help="Load <TOOLGUARD_POLICY_DIR or policies>/ENV.toml.")]


def stderr_console() -> Console:
    """A rich console on the current sys.stderr (built per call: tests swap it)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


def load_cli_policy(file: Path | None, env: str | None) -> Policy:
    """The policy a command reads (``explain``, ``mcp-proxy``): ``file``, else the ``env``
    environment's file, else what the environment selects; exits 2 listing every problem if
    it is invalid."""
    from rich.text import Text

    try:
        return read_cli_policy(file, env)
    except PolicyError as error:
        err = stderr_console()
        for problem in error.problems:
            err.print(Text(str(problem), style="red"))
        fail(f"invalid policy ({len(error.problems)} problem(s))")


def read_cli_policy(file: Path | None, env: str | None) -> Policy:
    """``file``, else the policy of ``--env`` ``env`` (problems name the option), else the
    one the environment selects.

    Raises:
        PolicyError: listing every problem.
    """
    from toolguard.policy._loader import load_env_option_policy, load_policy, policy_from_env

    if file is not None:
        return load_policy(file)
    if env is not None:
        return load_env_option_policy(env, "--env")
    return policy_from_env()


def shared_store_guard(file: Path | None, env: str | None) -> Guard:
    """A guard on the store the policy and environment select, for a command that changes a
    task other processes run (``approve``); exits 2 if both ``file`` and ``env``
    are given, the policy is invalid, or the store is per-process memory, which no other
    process can see."""
    from toolguard.engine._engine import Guard
    from toolguard.stores import MemoryStore

    if file is not None and env is not None:
        fail("give --policy FILE or --env NAME, not both")
    guard = Guard(load_cli_policy(file, env), strict_tools=False)
    if isinstance(guard.store, MemoryStore):
        fail("no shared store is configured, so no other process would see this: set "
             "TOOLGUARD_STORE__URL=redis://... or sqlite:///PATH (the store your agents "
             "use) or [store] in --policy")
    return guard


def fail(message: str) -> NoReturn:
    from rich.text import Text

    stderr_console().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(BAD_INPUT)


def write_stdout(text: str) -> None:
    """Write ``text`` to stdout whole, at once. Straight to the file descriptor, a partial
    write at a time: Python's buffered writer can repeat or drop part of a write to a full
    pipe that a signal interrupts (a Ctrl-C that asks a long command to stop after the piece
    at hand), and a streamed report must stay one valid document. A stdout without a
    descriptor (a test's capture) is written as text."""
    stdout = sys.stdout
    try:
        fd = stdout.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor
        typer.echo(text, nl=False)
        stdout.flush()
        return
    stdout.flush()
    rest = memoryview(text.encode(stdout.encoding or "utf-8", stdout.errors or "strict"))
    while rest:
        rest = rest[os.write(fd, rest):]
