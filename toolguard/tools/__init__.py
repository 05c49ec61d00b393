"""Tools: what a tool is to the guard, and its arguments on the way in.

Owns :class:`~toolguard.ToolSpec` and the decorators (``_spec``, ``_decorators``), the tool
objects of agent frameworks read by duck typing (``_frameworks``, ``_injected``), tools
registered by name and the ``run=`` executor (``_integration``), a tool's effective settings
(``_resolve``) and its entry's checks (``_entries``), argument schemas and their validation
(``_schema``, ``_schema_words``), the model's JSON passed to typed parameters (``_coerce``),
the schemas exported for the model (``_exports``), and the task of the active ``with`` block
(``_context``), through which a decorated tool called directly reaches its task.

May import: the root vocabulary, :mod:`toolguard.policy` and :mod:`toolguard.hashing`; never
the engine, not even for a type: the decorators see the active task through a protocol
(``_context.ActiveTask``).
"""
