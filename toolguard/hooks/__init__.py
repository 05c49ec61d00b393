"""Coding-agent hooks: Claude Code, Codex CLI and Gemini CLI guarded through their hook
protocols.

Owns one hook event answered (``_hook``), the hosts' protocols and settings files
(``_hosts``), the per-user hook server (``_server``) and the commands ``hook``,
``install``, ``uninstall``, ``status`` and ``resume`` (``_cli``). The command the hosts run
per event is ``toolguard/_hook_client.py``: it stays at the package root because its path
is written into the hosts' settings files, and it imports only the standard library.

May import: the root vocabulary, the engine, :mod:`toolguard.policy`,
:mod:`toolguard.hashing`, :mod:`toolguard.stores` and :mod:`toolguard.commands`.
"""
