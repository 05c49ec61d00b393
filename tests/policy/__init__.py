"""Policy files, the environment and the shipped policies (``toolguard.policy``)."""
