"""The framework adapters (``toolguard.adapters``), through each framework's own objects."""
