"""The engine: :class:`~toolguard.Guard` and :class:`~toolguard.Task`, and one call from
``Task.call`` to the tool and back.

Owns the one call path (``_path``) and its stages, one module per stage (``_prepare`` →
``_admit`` → ``_approve`` / ``_wait`` → ``_execute`` → ``_record`` → ``_events``; ``_engine``'s
docstring lists them in the order a call meets them), the pure decision core (``_core``: budget →
approval → idempotency → ladder), the two-step calls (``_pending``), parallel calls (``_batch``),
approvals (``_approval``, ``_approval_secret``), budgets (``_cost``, ``_usage``,
``_inflight``, ``_limits``), manual agent loops (``_loops``) and the audit events
(``_audit``).

May import: the root vocabulary (``toolguard._errors``, ``_types``, ``_results``,
``_outcomes``), :mod:`toolguard.tools`, :mod:`toolguard.policy`, :mod:`toolguard.hashing`,
:mod:`toolguard.shell` and :mod:`toolguard.stores`. Nothing here imports the command line,
the MCP proxy, the hooks, replay or the adapters: they are the engine's callers.
"""
