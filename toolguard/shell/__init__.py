"""The shell classifier: is a command line read-only, mutating, or a poll?

Owns the Bash syntax tree's walk (``_walk``, on tree-sitter-bash), the programs it knows and
the options each may take (``_programs``, ``_words``), the readers of programs whose
arguments decide their effect (``_readers``, ``_git``, ``_sed``) and the entry point
(``_classifier``).

May import: the root vocabulary (``toolguard._types``) only.
"""
