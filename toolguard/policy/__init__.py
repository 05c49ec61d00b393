"""The policy: the frozen models the engine reads, and how they are loaded.

Owns the models (``_model``), the loader (``_loader``: TOML → ``extends`` → JSON Schema →
semantic checks → models, STYLE.md §10), its checks (``_checks``) and the position of every
key in its files (``_layers``), the environment variables (``_settings``), the order of a
ladder's thresholds (``_ladder_order``) and the policies the package ships, by name
(``_shipped``; the files themselves are ``policies/`` and ``examples/policies/``, mapped into
the wheel, and the JSON Schema is ``toolguard/policy.schema.json``).

May import: the root vocabulary, :mod:`toolguard.hashing` (redaction keys, regexes, result
normalizers) and :mod:`toolguard.stores` (a SQLite path is checked where the policy is
loaded). Never the engine: the engine reads the policy, not the other way round.
"""
