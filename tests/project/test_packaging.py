"""The distribution as a user gets it: the wheel and the sdist build (the wheel from the
sdist), the wheel installs into a fresh virtual environment outside the repository, and the
README's Quickstart runs there as pasted, with the policies shipped inside the package."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import uv

import toolguard
from tests.conftest import ROOT
from tests.docs_blocks import readme_quickstart

DECISIONS = {d.value for d in toolguard.Decision}


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([str(part) for part in command], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=300, check=False)
    assert done.returncode == 0, f"{command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_wheel_runs_the_readme_quickstart_outside_the_repository(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    # no flags: the sdist first, then the wheel built from the unpacked sdist
    _run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, ROOT, cwd=tmp_path)
    version = toolguard.__version__
    wheel = dist / f"agent_toolguard-{version}-py3-none-any.whl"
    assert sorted(p.name for p in dist.iterdir()) == [wheel.name,
                                                      f"agent_toolguard-{version}.tar.gz"]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    shipped = {f"toolguard/policies/{p.name}" for p in (ROOT / "policies").glob("*.toml")}
    shipped |= {f"toolguard/policies/examples/{p.name}"
                for p in (ROOT / "examples" / "policies").glob("*.toml")}
    assert shipped <= names
    assert {"toolguard/py.typed", "toolguard/policy.schema.json"} <= names

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    # uv installs what pip would (the wheel's own requirements, from the index) in seconds;
    # pip's resolver takes over a minute for the same set on a loaded machine
    _run(uv.find_uv_bin(), "pip", "install", "--quiet", "--python", python, wheel, cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "quickstart.py").write_text(readme_quickstart())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TOOLGUARD_"))}
    where = _run(python, "-c", "import toolguard; print(toolguard.__file__)", cwd=elsewhere,
                 env=env)
    assert Path(where.strip()).is_relative_to(venv)
    out = _run(python, "quickstart.py", cwd=elsewhere, env=env)
    first_words = [line.split()[0] for line in out.splitlines() if line.strip()]
    decisions = [word for word in first_words if word in DECISIONS]
    assert decisions == ["allow", "cached", "block", "allow", "allow", "warn", "block", "halt"]
    listed = _run(venv / "bin" / "toolguard", "policies", cwd=elsewhere, env=env)
    assert {"default", "prod", "coding-agent"} <= {line.split()[0] for line in
                                                  listed.splitlines()[:-1]}
