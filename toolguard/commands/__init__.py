"""The command line's commands, beside the entry point :mod:`toolguard.cli` (which stays a
module: ``toolguard = "toolguard.cli:main"``).

Owns what the commands share (``_common``: loading the policy a command reads, usage errors;
``_tables``: how a table is printed), ``toolguard replay`` (``_replay``; its progress bar and
Ctrl-C: ``_progress``) and ``toolguard tune`` (``_tune``). ``toolguard mcp-proxy`` and the
hook commands live with what they run (:mod:`toolguard.mcp`, :mod:`toolguard.hooks`).

May import: anything but the other command packages' modules (:mod:`toolguard.mcp`,
:mod:`toolguard.hooks`), which import this one; :mod:`toolguard.replay` imports ``_tables``.
"""
