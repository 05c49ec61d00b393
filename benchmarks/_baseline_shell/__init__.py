"""A baseline for ``benchmarks/shell.py``: a shell classifier on a hand-written lexer (no
Bash grammar), measured beside toolguard's in the same run. Not used by the package."""
