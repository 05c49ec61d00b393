"""Integrations with agent frameworks and tool protocols, one module per framework, each behind
an extra that its ImportError names (``toolguard.adapters.mcp``: ``toolguard[mcp]``)."""
