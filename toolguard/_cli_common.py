"""What the CLI commands share: loading the policy a command reads (exit 2 listing every
problem), and reporting a usage error. Imported by ``cli`` and by the command modules it
registers (``_mcp_proxy``), which do not import each other."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer

from ._errors import PolicyError

if TYPE_CHECKING:
    from rich.console import Console

    from ._policy import Policy

__all__ = ["BAD_INPUT", "fail", "load_cli_policy", "stderr_console"]

BAD_INPUT = 2


def stderr_console() -> Console:
    """A rich console on the current sys.stderr (built per call: tests swap it)."""
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True, highlight=False, markup=False)


def load_cli_policy(file: Path | None, env: str | None) -> Policy:
    """The policy a command reads (``explain``, ``mcp-proxy``): ``file``, else the ``env``
    environment's file, else what the environment selects; exits 2 listing every problem if
    it is invalid."""
    from rich.text import Text

    from ._policy_loader import load_policy, policy_from_env
    from ._settings import PREFIX

    try:
        if file is not None:
            return load_policy(file)
        if env is not None:
            environ = {k: v for k, v in os.environ.items() if k.upper() != f"{PREFIX}POLICY"}
            return load_policy(None, env={**environ, f"{PREFIX}ENV": env})
        return policy_from_env()
    except PolicyError as error:
        err = stderr_console()
        for problem in error.problems:
            err.print(Text(str(problem), style="red"))
        fail(f"invalid policy ({len(error.problems)} problem(s))")


def fail(message: str) -> NoReturn:
    from rich.text import Text

    stderr_console().print(Text(f"error: {message}", style="bold red"))
    raise typer.Exit(BAD_INPUT)
