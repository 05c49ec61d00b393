"""``toolguard mcp-proxy``: an MCP server that guards every tool call of another.

Owns the command (``_proxy``), one client session joined to one upstream session on raw
JSON-RPC (``_link``, its guarded calls ``_calls``, its ports, errors and handshake
``_ports``), the transports (``_wire``: stdio; ``_http_upstream``, ``_http_listener``:
streamable HTTP; ``_frames``: what they share) and the guard's results as MCP JSON
(``_results``, shared with the public adapter :mod:`toolguard.adapters.mcp`, which stays
where it is).

May import: the root vocabulary, the engine, :mod:`toolguard.hashing` (redaction),
:mod:`toolguard.commands` (what the commands share, tables) and
:mod:`toolguard.adapters.mcp` (the middleware the proxy runs).
"""
