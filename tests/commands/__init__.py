"""The ``toolguard`` command line (``toolguard.cli``, ``toolguard.commands``)."""
