"""``python -m toolguard``: the ``toolguard`` command. ``python -m toolguard hook HOST`` (what
``toolguard install`` writes into a host's settings) answers one hook event without loading
the rest of the command line (typer, rich)."""

from __future__ import annotations

import sys


def _main() -> None:
    if sys.argv[1:2] == ["hook"]:
        from .hooks._hook import main

        raise SystemExit(main(sys.argv[2:]))
    from .cli import main as cli

    cli()


if __name__ == "__main__":
    _main()
