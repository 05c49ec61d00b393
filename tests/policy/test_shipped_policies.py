"""The policies the package ships load by name (``tg.load_policy("default")``, ``--policy
coding-agent``, ``extends = "default"`` in a user's file); a path still loads a file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import toolguard as tg
from tests.conftest import ROOT
from toolguard.policy._shipped import is_policy_name, shipped_policies

FILES = sorted([*(ROOT / "policies").glob("*.toml"),
                *(ROOT / "examples" / "policies").glob("*.toml")])


def test_every_policy_file_ships_by_its_name() -> None:
    assert {name: path.resolve() for name, path in shipped_policies().items()} == {
        path.stem: path.resolve() for path in FILES}
    assert {"default", "dev", "prod", "coding-agent", "claude-code"} <= set(shipped_policies())


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_name_loads_the_same_policy_as_its_path(path: Path) -> None:
    by_name = tg.load_policy(path.stem, env={})
    by_path = tg.load_policy(path, env={})
    assert by_name == by_path
    assert Path(by_name.sources[-1]).resolve() == path.resolve()


def test_a_users_file_extends_a_shipped_policy_by_name(tmp_path: Path) -> None:
    mine = tmp_path / "mine.toml"
    mine.write_text('extends = "prod"\n[budget]\nmax_tool_calls = 7\n')
    policy = tg.load_policy(mine, env={})
    assert policy.budget.max_tool_calls == 7
    assert policy.default_effect == "deny"  # from prod
    assert [Path(s).name for s in policy.sources] == ["default.toml", "prod.toml", "mine.toml"]
    assert tg.load_policy_dict({"extends": "default", "mode": "observe"}).mode is tg.Mode.OBSERVE


def test_the_environment_selects_a_shipped_policy_by_name() -> None:
    policy = tg.policy_from_env({"TOOLGUARD_POLICY": "prod"})
    assert [Path(s).name for s in policy.sources] == ["default.toml", "prod.toml"]


def test_an_unknown_name_lists_the_shipped_ones(tmp_path: Path) -> None:
    with pytest.raises(tg.PolicyError, match=r'no policy named "defualt".*shipped: airline, '):
        tg.load_policy("defualt", env={})
    mine = tmp_path / "mine.toml"
    mine.write_text('extends = "defualt"\n')
    with pytest.raises(tg.PolicyError, match=r"mine.toml:1:1: extends: no policy named"):
        tg.load_policy(mine, env={})


def test_a_path_still_loads_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "default").write_text('mode = "off"\n')  # a file whose name is a policy's
    (tmp_path / "local.toml").write_text('mode = "observe"\n')
    monkeypatch.chdir(tmp_path)
    assert tg.load_policy("./default", env={}).mode is tg.Mode.OFF
    assert tg.load_policy("local.toml", env={}).mode is tg.Mode.OBSERVE
    assert tg.load_policy("default", env={}).mode is tg.Mode.ENFORCE  # the shipped one


@pytest.mark.parametrize(("reference", "named"), [
    ("default", True), ("coding-agent", True), ("swe_agent2", True),
    ("default.toml", False), ("./default", False), ("policies/default", False),
    ("a\\b", False), ("", False), (".hidden", False), ("-x", False),
])
def test_what_counts_as_a_name(reference: str, named: bool) -> None:
    assert is_policy_name(reference) is named


def test_the_policies_command_lists_every_shipped_policy() -> None:
    done = subprocess.run([sys.executable, "-m", "toolguard.cli", "policies"],
                          capture_output=True, text=True, check=True, timeout=60)
    listed = [line.split()[0] for line in done.stdout.splitlines()[:-1]]
    assert listed == list(shipped_policies())
    assert "Production: the defaults with tight budgets" in done.stdout
