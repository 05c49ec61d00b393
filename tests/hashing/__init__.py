"""Canonical arguments, result normalization, redaction, policy regexes (``toolguard.hashing``)."""
