"""``toolguard check``, ``schema`` and ``explain`` through typer's CliRunner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolguard.cli import app
from toolguard.policy._loader import policy_schema

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "policies"
VALID = FIXTURES / "valid"
INVALID = FIXTURES / "invalid"
WIDE = {"COLUMNS": "400"}  # rich tables must not fold the values under test


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    for name in ("TOOLGUARD_ENV", "TOOLGUARD_POLICY", "TOOLGUARD_POLICY_DIR"):
        monkeypatch.delenv(name, raising=False)
    return CliRunner()


def test_check_valid_files(runner: CliRunner) -> None:
    files = [str(VALID / "full.toml"), str(ROOT / "policies" / "prod.toml")]
    result = runner.invoke(app, ["check", *files])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [f"{f}: ok" for f in files]


def test_check_lists_every_problem_and_exits_1(runner: CliRunner) -> None:
    ok = str(VALID / "full.toml")
    bad = str(INVALID / "many_problems.toml")
    result = runner.invoke(app, ["check", ok, bad, str(INVALID / "syntax_error.toml")])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert lines[0] == f"{ok}: ok"
    assert f'{bad}:2:1: mode: must be one of "enforce", "observe", "off", got "loud"' in lines
    assert f"{bad}:13:15: tools.write_file.args.path.normalize: " in result.output
    assert sum(line.startswith(f"{bad}:") for line in lines) == 6
    syntax = INVALID / "syntax_error.toml"
    assert f"{syntax}:3:14: TOML syntax error: Invalid value" in lines


def test_check_a_missing_file_is_one_problem_among_the_others(runner: CliRunner) -> None:
    """Every file is still checked (a missing one once made the argument parser stop)."""
    result = runner.invoke(app, ["check", str(VALID / "full.toml"), "no/such/policy.toml"])
    assert result.exit_code == 1
    assert "no/such/policy.toml: cannot read policy file" in result.output
    assert "<root>" not in result.output  # regression: the file was labelled "<root>:"
    assert "full.toml: ok" in result.output
    assert "Traceback" not in result.output


def test_check_reads_the_environments_overrides_as_the_guard_does(
        runner: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that is valid alone but not under a ``TOOLGUARD_*`` override (which the hook
    and every guard apply) is not reported ok."""
    policy = str(ROOT / "policies" / "default.toml")
    monkeypatch.setenv("TOOLGUARD_LADDER__READONLY__BLOCK_AT", "abc")
    result = runner.invoke(app, ["check", policy])
    assert result.exit_code == 1, result.output
    assert ('env TOOLGUARD_LADDER__READONLY__BLOCK_AT: ladder.readonly.block_at: must be an '
            'integer ≥ 2, got "abc"') in result.output
    assert f"{policy}: invalid under this environment's TOOLGUARD_* overrides" in result.output
    monkeypatch.setenv("TOOLGUARD_LADDER__READONLY__BLOCK_AT", "4")
    assert runner.invoke(app, ["check", policy]).output == f"{policy}: ok\n"


def test_check_needs_a_file(runner: CliRunner) -> None:
    assert runner.invoke(app, ["check"]).exit_code == 2


def test_schema_prints_the_json_schema(runner: CliRunner) -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0
    assert json.loads(result.output) == policy_schema()


def _rows(output: str) -> dict[str, list[str]]:
    """Table rows of ``explain`` (plain columns, as piped) by setting name: [value, source]."""
    rows: dict[str, list[str]] = {}
    for line in output.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == 3:
            rows[cells[0]] = cells[1:]
    return rows


def test_explain_shows_values_and_sources(runner: CliRunner) -> None:
    base, child = str(VALID / "base.toml"), str(VALID / "child.toml")
    env = {**WIDE, "TOOLGUARD_BUDGET__MAX_TOKENS": "999"}
    result = runner.invoke(app, ["explain", child, "--tool", "send_email"], env=env)
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["effect"] == ["mutating", base]
    assert rows["max_calls"] == ["1", child]
    assert rows["idempotency_ttl_s"] == ["3600.0", "built-in"]
    assert rows["mutating_ladder"] == ["warn_at 2, block_at 3, halt_at 6",
                                       f"warn_at, block_at: {base}; halt_at: {child}"]
    assert rows["budget.max_tool_calls"] == ["20", child]
    assert rows["budget.max_tokens"] == ["999", "env TOOLGUARD_BUDGET__MAX_TOKENS"]
    assert rows["budget.timeout_s"] == ["none (no limit)", "built-in"]
    assert f"policy files: {base}, {child}" in result.output


def test_explain_env_selects_a_file(runner: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "staging.toml").write_text(
        "[tools.deploy]\nrequires_approval = true\n", encoding="utf-8"
    )
    env = {**WIDE, "TOOLGUARD_POLICY_DIR": str(tmp_path)}
    result = runner.invoke(app, ["explain", "--tool", "deploy", "--env", "staging"], env=env)
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["requires_approval"] == ["true", str(tmp_path / "staging.toml")]
    assert rows["idempotency_scope"] == ["task", "built-in"]  # approval implies task


def test_explain_without_file_uses_the_environment(runner: CliRunner) -> None:
    env = {**WIDE, "TOOLGUARD_TOOLS__X__MAX_CALLS": "4", "TOOLGUARD_DEFAULT_EFFECT": "deny"}
    result = runner.invoke(app, ["explain", "--tool", "x"], env=env)
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["max_calls"] == ["4", "env TOOLGUARD_TOOLS__X__MAX_CALLS"]
    assert rows["deny"] == ["true", 'default_effect = "deny" (env TOOLGUARD_DEFAULT_EFFECT)']
    assert "policy files: none (built-in defaults)" in result.output


def test_explain_finds_an_override_spelled_without_case(runner: CliRunner) -> None:
    env = {**WIDE, "TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS": "2"}
    result = runner.invoke(app, ["explain", "--tool", "sendEmail"], env=env)
    assert result.exit_code == 0, result.output
    assert _rows(result.output)["max_calls"] == [
        "2", "env TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS"]


def test_explain_an_invalid_policy_exits_2_listing_problems(runner: CliRunner) -> None:
    bad = str(INVALID / "wrong_type.toml")
    result = runner.invoke(app, ["explain", bad, "--tool", "send_email"])
    assert result.exit_code == 2
    assert f"{bad}:4:25: tools.send_email.ladder.block_at" in result.output
    assert "error: invalid policy (1 problem(s))" in result.output
    assert "Traceback" not in result.output


def test_explain_a_missing_file_exits_2_naming_it(runner: CliRunner) -> None:
    result = runner.invoke(app, ["explain", "absent.toml", "--tool", "t"])
    assert result.exit_code == 2
    assert "absent.toml: cannot read policy file" in result.output


def test_explain_file_and_env_together_is_bad_input(runner: CliRunner) -> None:
    result = runner.invoke(
        app, ["explain", str(VALID / "full.toml"), "--tool", "t", "--env", "prod"]
    )
    assert result.exit_code == 2
    assert "not both" in result.output


def test_explain_needs_a_tool(runner: CliRunner) -> None:
    assert runner.invoke(app, ["explain", str(VALID / "full.toml")]).exit_code == 2


def test_explain_prints_rule_patterns_as_written(runner: CliRunner, tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[[tools.bash.rules]]\nmatch = { command = "^ls [/]tmp [a-z]+" }\n'
                    'effect = "readonly"\n', encoding="utf-8")
    result = runner.invoke(app, ["explain", str(path), "--tool", "bash"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "^ls [/]tmp [a-z]+" in result.output


def test_check_prints_a_parents_problem_once_and_marks_each_child(runner: CliRunner,
                                                                  tmp_path: Path) -> None:
    (tmp_path / "base.toml").write_text('mode = "bogus"\n')
    (tmp_path / "a.toml").write_text('extends = "base.toml"\n')
    (tmp_path / "b.toml").write_text('extends = "base.toml"\n')
    files = [str(tmp_path / n) for n in ("base.toml", "a.toml", "b.toml")]
    result = runner.invoke(app, ["check", *files])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert sum("must be one of" in line for line in lines) == 1
    assert f"{files[1]}: invalid (a file it extends has problems)" in lines
    assert f"{files[2]}: invalid (a file it extends has problems)" in lines


def test_explain_shows_the_detection_settings(runner: CliRunner) -> None:
    policy = str(ROOT / "examples" / "policies" / "airline.toml")
    env = {**WIDE, "TOOLGUARD_LADDER__MAX_PROGRESS_RESETS": "0"}
    result = runner.invoke(app, ["explain", policy, "--tool", "think"], env=env)
    assert result.exit_code == 0, result.output
    rows = _rows(result.output)
    assert rows["stagnation_warn_at"] == ["0 (off)", policy]
    assert rows["stagnation_block_at"] == ["0 (off)", policy]
    assert rows["max_progress_resets"] == ["0 (off)", "env TOOLGUARD_LADDER__MAX_PROGRESS_RESETS"]
    assert rows["shell"] == ["none (the tool's effect)", "built-in"]
    assert rows["result"] == ["strip_volatile", "built-in"]
    coding = str(ROOT / "examples" / "policies" / "coding-agent.toml")
    rows = _rows(runner.invoke(app, ["explain", coding, "--tool", "bash"], env=WIDE).output)
    assert rows["shell"] == ["command", coding]
    assert rows["stagnation_warn_at"] == ["4", "built-in"]


@pytest.mark.parametrize("command", [["explain", "--tool", "t"], ["replay", "examples/traces"],
                                     ["mcp-proxy", "--", "true"]])
def test_env_option_problems_name_the_option_not_the_variable(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        command: list[str]) -> None:
    """Regression: ``--env NAME`` errors said ``TOOLGUARD_ENV``, which the user never set."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("TOOLGUARD_POLICY_DIR", str(tmp_path))
    missing = runner.invoke(app, [*command[:1], "--env", "nope", *command[1:]])
    assert missing.exit_code == 2, missing.output
    assert (f"{tmp_path / 'nope.toml'}: cannot read policy file (selected by --env nope)"
            in missing.output)
    bad = runner.invoke(app, [*command[:1], "--env", "../x", *command[1:]])
    assert bad.exit_code == 2, bad.output
    assert "--env: must be the name of a file in TOOLGUARD_POLICY_DIR" in bad.output
    for result in (missing, bad):
        assert "TOOLGUARD_ENV" not in result.output and "Traceback" not in result.output


def test_toolguard_env_problems_still_name_the_variable(
        runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGUARD_POLICY_DIR", str(tmp_path))
    monkeypatch.setenv("TOOLGUARD_ENV", "nope")
    result = runner.invoke(app, ["explain", "--tool", "t"])
    assert result.exit_code == 2
    assert "(selected by TOOLGUARD_ENV=nope)" in result.output


@pytest.mark.parametrize("command", [["schema"], ["check", "policies/default.toml"],
                                     ["replay", "examples/traces"]])
def test_an_output_that_cannot_be_written_is_an_error_not_a_traceback(
        command: list[str]) -> None:
    """Regression (break-it pass): ``toolguard schema > /dev/full`` printed a traceback."""
    import subprocess
    import sys

    if not Path("/dev/full").exists():
        pytest.skip("needs /dev/full (Linux)")
    with Path("/dev/full").open("w") as full:
        done = subprocess.run([sys.executable, "-m", "toolguard.cli", *command], cwd=ROOT,
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
                              check=False)
    assert done.returncode == 2
    assert done.stderr == "toolguard: error: No space left on device (writing the output)\n"


def test_explain_prints_a_policys_control_characters_escaped(runner: CliRunner,
                                                            tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[tools."x\\u001b]0;t"]\nshell = "cmd\\u001b[2J"\n')
    result = runner.invoke(app, ["explain", str(path), "--tool", "x\x1b]0;t"], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "\x1b" not in result.output
    assert "cmd\\x1b[2J" in result.output and "x\\x1b]0;t: effective settings" in result.output


def test_check_refuses_what_contradicts_or_names_nothing(runner: CliRunner,
                                                         tmp_path: Path) -> None:
    """Regression (newcomer pass): each of these said ok."""
    path = tmp_path / "p.toml"
    path.write_text('[tools.a]\neffect = "readonly"\nrequires_approval = true\n'
                    '[tools.""]\nmax_calls = 3\n'
                    '[idempotency]\ntimeout_exceptions = ["not a class!!"]\n')
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 1
    assert "tools.a.requires_approval: must not be true" in result.output
    assert 'tools."": must be a non-empty tool name' in result.output
    assert "idempotency.timeout_exceptions[0]: must be an exception class name" in result.output


def test_version_prints_the_package_version(runner: CliRunner) -> None:
    import toolguard

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"toolguard {toolguard.__version__}\n"
    assert "--version" in runner.invoke(app, ["--help"]).output


def test_version_wins_over_a_command(runner: CliRunner) -> None:
    result = runner.invoke(app, ["--version", "check", "no/such.toml"])
    assert result.exit_code == 0 and result.output.startswith("toolguard ")


@pytest.mark.parametrize("command", ["check", "schema", "explain", "replay", "mcp-proxy",
                                     "approve", "resume", "policies"])
def test_command_help_is_plain_text(runner: CliRunner, command: str) -> None:
    """Regression (newcomer pass): approve's help showed ``TOOLGUARD_STORE__URL`` as written
    in the docstring; the help is plain text, so no reST markup may reach it."""
    result = runner.invoke(app, [command, "--help"], env=WIDE)
    assert result.exit_code == 0
    for markup in ("``", ":func:", ":mod:", ":class:", ":data:"):
        assert markup not in result.output
