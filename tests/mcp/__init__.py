"""``toolguard mcp-proxy`` (``toolguard.mcp``) on its transports."""
