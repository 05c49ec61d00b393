"""``toolguard replay`` (``toolguard.replay``) on recorded and synthetic runs."""
