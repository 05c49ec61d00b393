"""The coding-agent hooks (``toolguard.hooks``), with the hosts' real CLIs."""
