"""The policies the package ships, by name: ``tg.load_policy("default")``, ``extends = "prod"``.

One copy of each file, in the repository's ``policies/`` (``default``, ``dev``, ``prod``) and
``examples/policies/`` (``airline``, ``claude-code``, ``codex``, ...). The wheel's build maps
the two folders into the package (``toolguard/policies/`` and ``toolguard/policies/examples/``,
``[tool.hatch.build.targets.wheel.force-include]`` in ``pyproject.toml``); a source checkout
(an editable install) reads them where they are. Either way the files are found beside the
package through :mod:`importlib.resources`.

A reference names a shipped policy when it is a bare name: no path separator and no ``.toml``
suffix (``"default"``, ``"coding-agent"``). Anything else is a file path.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

__all__ = ["is_policy_name", "shipped_policies", "shipped_policy"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def is_policy_name(reference: str) -> bool:
    """Whether ``reference`` names a shipped policy rather than a file path."""
    return bool(_NAME.fullmatch(reference)) and not reference.endswith(".toml")


def shipped_policies() -> dict[str, Path]:
    """Every shipped policy: its name (the file name without ``.toml``) and its file, sorted
    by name."""
    found: dict[str, Path] = {}
    for folder in _folders():
        if folder.is_dir():
            found.update((path.stem, path) for path in folder.glob("*.toml"))
    return dict(sorted(found.items()))


def shipped_policy(name: str) -> Path | None:
    """The file of the shipped policy ``name``, or ``None`` if there is none by that name."""
    return shipped_policies().get(name)


def _folders() -> list[Path]:
    package = Path(str(resources.files("toolguard")))
    if (package / "policies").is_dir():  # an installed wheel: its build put them here
        return [package / "policies", package / "policies" / "examples"]
    root = package.parent  # a source checkout
    return [root / "policies", root / "examples" / "policies"]
