"""The state stores (``toolguard.stores``) on one contract, real Redis and SQLite."""
