"""Environment variables: file selection and overrides of any key, validated like a file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from toolguard._errors import PolicyError, PolicyProblem
from toolguard._types import Effect, Mode
from toolguard.policy._loader import load_policy, policy_from_env
from toolguard.policy._model import LadderThresholds, Policy
from toolguard.policy._settings import OVERRIDE_KEYS, parse_value, read_environment

ROOT = Path(__file__).resolve().parents[2]
VALID = ROOT / "tests" / "fixtures" / "policies" / "valid"


def _problems(env: dict[str, str], path: Path | None = None) -> list[PolicyProblem]:
    with pytest.raises(PolicyError) as caught:
        load_policy(path, env=env)
    return list(caught.value.problems)


def test_no_variables_means_built_in_defaults() -> None:
    assert policy_from_env({}) == Policy()
    assert policy_from_env({}).sources == ()


def test_no_file_is_searched_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """Even with ./policies/default.toml present, no ENV or POLICY means built-ins."""
    monkeypatch.chdir(ROOT)
    assert (ROOT / "policies" / "default.toml").is_file()
    assert policy_from_env({}) == Policy()


def test_overrides_by_nested_path() -> None:
    policy = policy_from_env(
        {
            "TOOLGUARD_MODE": "observe",
            "TOOLGUARD_BUDGET__MAX_TOOL_CALLS": "20",
            "TOOLGUARD_BUDGET__TIMEOUT_S": "1.5",
            "TOOLGUARD_STORE__URL": "redis://cache:6379/0",
            "TOOLGUARD_STRICT_TOOLS": "false",
            "TOOLGUARD_LADDER__READONLY__HALT_AT": "9",
            "TOOLGUARD_TOOLS__SEND_EMAIL__MAX_CALLS": "2",
            "PATH": "/usr/bin",
        }
    )
    assert policy.mode is Mode.OBSERVE
    assert policy.budget.max_tool_calls == 20
    assert policy.budget.timeout_s == 1.5
    assert policy.store.url == "redis://cache:6379/0"
    assert policy.strict_tools is False
    assert policy.ladder.readonly == LadderThresholds(warn_at=3, block_at=4, halt_at=9)
    assert policy.tools["send_email"].max_calls == 2
    assert policy.source_of("budget.max_tool_calls") == "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS"
    assert policy.source_of("mode") == "env TOOLGUARD_MODE"
    assert policy.source_of("ladder.readonly") == "env TOOLGUARD_LADDER__READONLY__HALT_AT"
    assert policy.source_of("budget.max_tokens") == "built-in"


def test_environment_beats_the_file() -> None:
    child = str(VALID / "child.toml")
    policy = load_policy(child, env={"TOOLGUARD_BUDGET__MAX_TOOL_CALLS": "5"})
    assert policy.budget.max_tool_calls == 5
    assert policy.budget.max_tokens == 100_000
    assert policy.source_of("budget.max_tool_calls") == "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS"
    assert policy.source_of("budget.max_tokens") == str(VALID / "base.toml")
    assert policy.source_of("budget") == "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS"
    assert policy.sources == (str(VALID / "base.toml"), child)  # files only


def test_values_are_json_when_they_parse() -> None:
    assert parse_value("20") == 20
    assert parse_value("1.5") == 1.5
    assert parse_value("true") is True
    assert parse_value("null") is None
    assert parse_value('["a", "b"]') == ["a", "b"]
    assert parse_value('{"warn_at": 2}') == {"warn_at": 2}
    assert parse_value("observe") == "observe"
    assert parse_value('"123"') == "123"
    assert parse_value("NaN") == "NaN"
    assert parse_value("") == ""


def test_json_values_set_arrays_tables_and_unset_limits() -> None:
    policy = load_policy(
        VALID / "base.toml",
        env={
            "TOOLGUARD_AUDIT__REDACT": '["cookie", "session"]',
            "TOOLGUARD_BUDGET__MAX_TOKENS": "null",
            "TOOLGUARD_TOOLS__BASH__RULES": '[{"match": {"command": "^ls"}, "effect": "readonly"}]',
            "TOOLGUARD_TOOLS__BASH__LADDER": '{"halt_at": 9}',
            "TOOLGUARD_STORE__KEY_PREFIX": '"123"',
        },
    )
    assert policy.audit.redact == ("cookie", "session")
    assert policy.budget.max_tokens is None  # no limit
    assert policy.tools["bash"].rules[0].effect is Effect.READONLY
    assert policy.tools["bash"].ladder is not None
    assert policy.tools["bash"].ladder.halt_at == 9
    assert policy.store.key_prefix == "123"
    assert policy.source_of("tools.bash.ladder") == "env TOOLGUARD_TOOLS__BASH__LADDER"
    assert policy.source_of("tools.bash.rules[0].effect") == "env TOOLGUARD_TOOLS__BASH__RULES"


def test_tool_names_match_the_file_case_insensitively(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[tools.sendEmail]\nmax_calls = 3\n", encoding="utf-8")
    policy = load_policy(
        path,
        env={
            "TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS": "1",
            "TOOLGUARD_TOOLS__OTHER_TOOL__MAX_CALLS": "4",
        },
    )
    assert set(policy.tools) == {"sendEmail", "other_tool"}
    assert policy.tools["sendEmail"].max_calls == 1
    assert policy.source_of("tools.sendEmail.max_calls") == (
        "env TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS"
    )


def test_tool_names_match_a_registered_tool_case_insensitively() -> None:
    @tg.mutating
    def sendEmail(to: str) -> str:  # noqa: N802 - a camelCase tool name on purpose
        return "sent"

    env = {"TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS": "2"}
    guard = tg.Guard(policy_from_env(env), tools=[sendEmail])  # in code only, not in a file
    assert set(guard.policy.tools) == {"sendEmail"}
    assert guard.settings("sendEmail").max_calls == 2
    assert guard.policy.source_of("tools.sendEmail.max_calls") == (
        "env TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS")
    with pytest.raises(tg.PolicyError) as info:  # a typo: the problem names the variable
        tg.Guard(policy_from_env({"TOOLGUARD_TOOLS__SENDEMAL__MAX_CALLS": "2"}),
                 tools=[sendEmail])
    [problem] = info.value.problems
    assert (problem.source, problem.path) == ("env TOOLGUARD_TOOLS__SENDEMAL__MAX_CALLS",
                                              "tools.sendemal")
    assert "did you mean 'sendEmail'?" in problem.message

    @tg.mutating
    def sendemail(to: str) -> str:
        return "sent"

    for variable in ("TOOLGUARD_TOOLS__SENDEMAIL__MAX_CALLS",
                     "TOOLGUARD_TOOLS__sendEmail__MAX_CALLS"):
        with pytest.raises(tg.PolicyError) as info:  # two tools it could mean: refused
            tg.Guard(policy_from_env({variable: "2"}), tools=[sendEmail, sendemail])
        [problem] = info.value.problems
        assert problem.source == f"env {variable}"
        assert "matches the registered tools 'sendEmail', 'sendemail'" in problem.message


def test_variable_names_are_case_insensitive() -> None:
    policy = policy_from_env({"toolguard_mode": "off", "Toolguard_Budget__Max_Tokens": "9"})
    assert policy.mode is Mode.OFF
    assert policy.budget.max_tokens == 9
    assert policy.source_of("budget.max_tokens") == "env Toolguard_Budget__Max_Tokens"


def test_a_bad_value_names_the_variable() -> None:
    [problem] = _problems({"TOOLGUARD_BUDGET__MAX_TOOL_CALLS": "twenty"})
    assert problem.source == "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS"
    assert problem.path == "budget.max_tool_calls"
    assert problem.message == 'must be an integer ≥ 1, got "twenty"'
    assert problem.line is None
    assert str(problem) == (
        "env TOOLGUARD_BUDGET__MAX_TOOL_CALLS: budget.max_tool_calls: "
        'must be an integer ≥ 1, got "twenty"'
    )


def test_every_bad_variable_is_reported_with_the_files_problems(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('mode = "loud"\n', encoding="utf-8")
    found = {
        (p.source, p.path, p.message)
        for p in _problems(
            {
                "TOOLGUARD_BUDGET__MAX_TOOL_CALL": "5",
                "TOOLGUARD_DEFAULT_EFFECT": "maybe",
                "TOOLGUARD_TOOLS__BASH__RULES": (
                    '[{"match": {"command": "("}, "effect": "readonly"}]'
                ),
            },
            path,
        )
    }
    assert found == {
        (str(path), "mode", 'must be one of "enforce", "observe", "off", got "loud"'),
        (
            "env TOOLGUARD_BUDGET__MAX_TOOL_CALL",
            "budget.max_tool_call",
            "unknown key 'max_tool_call' (allowed: max_tool_calls, max_tokens, timeout_s, "
            "max_consecutive_failures, max_cost_usd, unknown_cost)",
        ),
        (
            "env TOOLGUARD_DEFAULT_EFFECT",
            "default_effect",
            'must be one of "readonly", "mutating", "poll", "deny", got "maybe"',
        ),
        (
            "env TOOLGUARD_TOOLS__BASH__RULES",
            "tools.bash.rules[0].match.command",
            "not a valid regular expression: missing ), unterminated subpattern at position 0, "
            'got "("',
        ),
    }


def test_a_variable_that_breaks_the_ladder_order_is_blamed() -> None:
    [problem] = _problems({"TOOLGUARD_LADDER__MUTATING__WARN_AT": "4"})
    assert problem.source == "env TOOLGUARD_LADDER__MUTATING__WARN_AT"
    assert problem.path == "ladder.mutating.warn_at"
    assert problem.message == "must be ≤ block_at (3, from built-in default)"


def test_a_whole_table_and_its_keys_cannot_both_be_set() -> None:
    problems = _problems(
        {"TOOLGUARD_BUDGET": '{"max_tokens": 5}', "TOOLGUARD_BUDGET__MAX_TOKENS": "6"}
    )
    [problem] = problems
    assert problem.source == "env TOOLGUARD_BUDGET__MAX_TOKENS"
    assert "TOOLGUARD_BUDGET sets the whole of budget" in problem.message
    assert policy_from_env({"TOOLGUARD_BUDGET": '{"max_tokens": 5}'}).budget.max_tokens == 5


def test_unrelated_toolguard_variables_are_ignored() -> None:
    assert policy_from_env({"TOOLGUARD_TEST_REDIS_URL": "redis://x", "TOOLGUARD_": "1"}) == Policy()


def test_env_selects_a_file_from_the_policy_dir(tmp_path: Path) -> None:
    (tmp_path / "prod.toml").write_text("[budget]\nmax_tool_calls = 11\n", encoding="utf-8")
    env = {"TOOLGUARD_ENV": "prod", "TOOLGUARD_POLICY_DIR": str(tmp_path)}
    policy = policy_from_env(env)
    assert policy.budget.max_tool_calls == 11
    assert policy.sources == (str(tmp_path / "prod.toml"),)
    assert policy.source_of("budget.max_tool_calls") == str(tmp_path / "prod.toml")


def test_env_defaults_to_the_policies_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    policy = policy_from_env({"TOOLGUARD_ENV": "prod"})
    assert policy.default_effect == "deny"
    assert policy.sources == ("policies/default.toml", "policies/prod.toml")


def test_policy_names_a_file_and_wins_over_env(tmp_path: Path) -> None:
    (tmp_path / "prod.toml").write_text('mode = "off"\n', encoding="utf-8")
    named = tmp_path / "named.toml"
    named.write_text('mode = "observe"\n', encoding="utf-8")
    env = {
        "TOOLGUARD_POLICY": str(named),
        "TOOLGUARD_ENV": "prod",
        "TOOLGUARD_POLICY_DIR": str(tmp_path),
    }
    policy = policy_from_env(env)
    assert policy.mode is Mode.OBSERVE
    assert policy.sources == (str(named),)


def test_an_explicit_path_wins_over_the_variables(tmp_path: Path) -> None:
    named = tmp_path / "named.toml"
    named.write_text('mode = "observe"\n', encoding="utf-8")
    policy = load_policy(VALID / "base.toml", env={"TOOLGUARD_POLICY": str(named)})
    assert policy.mode is Mode.ENFORCE


def test_a_missing_env_file_names_the_variable(tmp_path: Path) -> None:
    [problem] = _problems({"TOOLGUARD_ENV": "staging", "TOOLGUARD_POLICY_DIR": str(tmp_path)})
    assert problem.source == str(tmp_path / "staging.toml")
    assert problem.message == (
        "cannot read policy file (selected by TOOLGUARD_ENV=staging): No such file or directory"
    )


def test_an_env_name_must_not_be_a_path() -> None:
    [problem] = _problems({"TOOLGUARD_ENV": "../secrets"})
    assert problem.source == "env TOOLGUARD_ENV"
    assert "got '../secrets'" in problem.message


def test_none_reads_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLGUARD_BUDGET__MAX_TOKENS", "77")
    assert policy_from_env().budget.max_tokens == 77
    assert load_policy(VALID / "base.toml").budget.max_tokens == 77
    assert load_policy(VALID / "base.toml", env={}).budget.max_tokens == 100_000


def test_read_environment_reports_the_selection(tmp_path: Path) -> None:
    overrides = read_environment(
        {"TOOLGUARD_ENV": "dev", "TOOLGUARD_POLICY_DIR": str(tmp_path), "TOOLGUARD_MODE": "off"}
    )
    assert overrides.policy_file == tmp_path / "dev.toml"
    assert overrides.selected_by == "TOOLGUARD_ENV=dev"
    assert overrides.data == {"mode": "off"}
    assert overrides.variables == {("mode",): "TOOLGUARD_MODE"}
    assert overrides.problems == ()


def test_every_top_level_policy_key_can_be_overridden() -> None:
    assert set(OVERRIDE_KEYS) == set(Policy.model_fields) - {"sources"}


def test_guard_from_env_builds_the_guard_from_the_selected_file(tmp_path: Path) -> None:
    import toolguard as tg

    (tmp_path / "staging.toml").write_text(
        '[budget]\nmax_tool_calls = 2\n[tools.lookup]\nmax_calls = 1\n', encoding="utf-8")

    @tg.readonly
    def lookup(key: str) -> str:
        return key

    env = {"TOOLGUARD_ENV": "staging", "TOOLGUARD_POLICY_DIR": str(tmp_path),
           "TOOLGUARD_BUDGET__MAX_TOOL_CALLS": "5"}
    guard = tg.Guard.from_env(tools=[lookup], env=env)
    assert guard.policy.budget.max_tool_calls == 5  # the environment beats the file
    assert guard.settings("lookup").max_calls == 1
    task = guard.task("t")
    task.call("lookup", {"key": "a"})
    with pytest.raises(tg.BudgetExceeded):
        task.call("lookup", {"key": "b"})


def test_a_redis_url_with_an_explicit_memory_backend_is_refused() -> None:
    policy = tg.load_policy_dict({"store": {"backend": "memory",
                                            "url": "redis://127.0.0.1:6379/15"}})
    with pytest.raises(tg.PolicyError, match=r"a Redis URL is set, but store.backend"):
        tg.Guard(policy)


def test_reload_cannot_change_the_store_a_guard_built() -> None:
    guard = tg.Guard(tg.load_policy_dict({}))
    with pytest.raises(tg.PolicyError, match="cannot change on reload"):
        guard.reload_policy(tg.load_policy_dict({"store": {
            "backend": "redis", "url": "redis://127.0.0.1:6379/15"}}))
    with pytest.raises(tg.PolicyError, match="cannot change on reload"):
        guard.reload_policy(tg.load_policy_dict({"idempotency": {"max_entries": 10}}))
    assert guard.policy.store.backend == "memory"  # nothing swapped
    guard.reload_policy(tg.load_policy_dict({"budget": {"max_tool_calls": 5}}))
    assert guard.policy.budget.max_tool_calls == 5
    injected = tg.Guard(tg.load_policy_dict({}), store=tg.stores.MemoryStore())
    injected.reload_policy(tg.load_policy_dict({"idempotency": {"max_entries": 10}}))


def test_argument_options_must_name_an_argument_and_env_spelling_ignores_case() -> None:
    @tg.readonly
    def searchDocs(query: str, requestId: str = "") -> str:  # noqa: N802, N803 - camelCase tool
        return "ok"

    var = "TOOLGUARD_TOOLS__SEARCHDOCS__ARGS__REQUESTID__IGNORE"
    guard = tg.Guard.from_env([searchDocs], env={var: "true"})
    task = guard.task("t")
    first = task.call("searchDocs", {"query": "q", "requestId": "1"})
    second = task.call("searchDocs", {"query": "q", "requestId": "2"})
    assert first.args_hash == second.args_hash  # requestId is ignored: one signature

    typo = tg.load_policy_dict({"tools": {"searchDocs": {"args": {"requestid": {
        "ignore": True}}}}})
    with pytest.raises(PolicyError) as info:
        tg.Guard(typo, [searchDocs])
    [problem] = info.value.problems
    assert problem.path == "tools.searchDocs.args.requestid"
    assert "no argument 'requestid'" in problem.message and "'requestId'" in problem.message

    rule = tg.load_policy_dict({"tools": {"searchDocs": {"rules": [
        {"match": {"qurey": "x"}, "effect": "mutating"}]}}})
    with pytest.raises(PolicyError, match=r"rules\[0\].match.qurey"):
        tg.Guard(rule, [searchDocs])

    @tg.readonly
    def anything(**kwargs: Any) -> str:
        return "ok"

    tg.Guard(tg.load_policy_dict({"tools": {"anything": {"args": {"x": {"ignore": True}}}}}),
             [anything])


def test_environment_problems_name_the_variables_that_caused_them() -> None:
    with pytest.raises(PolicyError) as deeper:
        load_policy(None, env={"TOOLGUARD_TOOLS__BASH__RULES__0__EFFECT": "readonly"})
    assert deeper.value.problems[0].source == "env TOOLGUARD_TOOLS__BASH__RULES__0__EFFECT"
    with pytest.raises(PolicyError) as cased:
        load_policy(None, env={"TOOLGUARD_MODE": "observe", "toolguard_mode": "off"})
    [problem] = cased.value.problems
    assert (problem.source, problem.path) == ("env TOOLGUARD_MODE, toolguard_mode", "mode")


@pytest.mark.parametrize(("env", "variable", "what"), [
    ({"TOOLGUARD_POLICY": ""}, "TOOLGUARD_POLICY", "a policy file path"),
    ({"TOOLGUARD_POLICY": "  "}, "TOOLGUARD_POLICY", "a policy file path"),
    ({"TOOLGUARD_ENV": "prod", "TOOLGUARD_POLICY_DIR": ""}, "TOOLGUARD_POLICY_DIR",
     "a directory"),
])
def test_an_empty_selection_variable_is_named_not_read_as_the_current_directory(
        env: dict[str, str], variable: str, what: str) -> None:
    """Regression (break-it pass): TOOLGUARD_POLICY= said 'cannot read policy file (selected
    by TOOLGUARD_POLICY=.): not a regular file'."""
    with pytest.raises(PolicyError) as caught:
        load_policy(None, env=env)
    assert [str(p) for p in caught.value.problems] == [
        f"env {variable}: must be {what}, got an empty value (unset the variable instead)"]


def test_an_empty_policy_dir_without_toolguard_env_is_moot() -> None:
    assert load_policy(None, env={"TOOLGUARD_POLICY_DIR": ""}).sources == ()
