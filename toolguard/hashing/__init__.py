"""Hashing: the walks over JSON values that decide when two calls or two results are the
same, and what may be shown of them.

Owns canonical arguments and their hash (``_canonical``, ``_canonical_walk``), the model's
argument text parsed exactly (``_json_text``), result normalization and digests for progress
and stagnation (``_normalize``), redaction (``_redact``, with the credential shapes it searches
for in ``_shapes``) and the policy's regexes in linear
time (``_regex``).

May import: the root vocabulary, and :mod:`toolguard.policy`'s models for the options it
applies (``_normalize``: a result's ignore rules; ``_canonical`` for its types). No I/O, no
clock, no store.
"""
