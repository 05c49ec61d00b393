"""The shell classifier (``toolguard.shell``), with real bash."""
