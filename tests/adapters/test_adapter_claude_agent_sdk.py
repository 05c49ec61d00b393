"""``toolguard.adapters.claude_agent_sdk`` with the real Claude Agent SDK and the Claude Code
CLI it bundles, offline against the scripted loopback Messages API: the same looping model
as the CLI test, a halt that leaves the host's loop as ``tg.Halt``, and approval through the
SDK's own ``can_use_tool``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.fake_anthropic import FakeAnthropic

sdk = pytest.importorskip("claude_agent_sdk") if os.environ.get("CI") != "true" else \
    __import__("claude_agent_sdk")

from toolguard.adapters.claude_agent_sdk import ToolGuard  # noqa: E402


def _options(project: Path, url: str, **more: Any) -> Any:
    env = {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-test",
           "HOME": str(project / "home"), "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
           "DISABLE_AUTOUPDATER": "1", "DISABLE_TELEMETRY": "1",
           "DISABLE_ERROR_REPORTING": "1"}
    return sdk.ClaudeAgentOptions(cwd=str(project), env=env, model="claude-sonnet-4-5",
                                  setting_sources=[], **more)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    (tmp_path / "data.txt").write_text("forty-two\n")
    return tmp_path


def _tool_results(messages: list[Any]) -> list[tuple[str, bool]]:
    out = []
    for message in messages:
        if isinstance(message, sdk.UserMessage) and isinstance(message.content, list):
            for block in message.content:
                if isinstance(block, sdk.ToolResultBlock):
                    text = block.content
                    if isinstance(text, list):
                        text = "\n".join(str(b.get("text", "")) for b in text)
                    out.append((str(text), bool(block.is_error)))
    return out


async def test_a_looping_agent_halts_with_tg_halt(project: Path) -> None:
    out = project / "out.txt"
    write = ("Write", {"file_path": str(out), "content": "hello\n"})
    bash = ("Bash", {"command": f"cat {project}/data.txt", "description": "Show the data"})
    agent = ToolGuard()
    seen: list[Any] = []

    async def run(options: Any) -> None:
        async for message in agent.query("Write the file, look at the data.",
                                         options=options):
            seen.append(message)

    script: list[Any] = [write] * 3 + [bash] * 6 + ["All done."]
    with FakeAnthropic(script) as fake:
        options = _options(project, fake.url, allowed_tools=["Write", "Read", "Bash"])
        with pytest.raises(tg.RepeatedToolCalls) as halted:
            await run(options)
    assert halted.value.tool == "Bash" and "cat" in str(halted.value.args)
    results = _tool_results(seen)
    assert out.read_text() == "hello\n"
    assert [is_error for _, is_error in results[:3]] == [False, True, True]
    assert "NOT executed again" in results[1][0]
    assert len([text for text, _ in results if "forty-two" in text]) == 3
    final = seen[-1]
    assert isinstance(final, sdk.ResultMessage)
    assert "You have called Bash with these same arguments 3 times" in \
        fake.texts_to_model()


async def test_approval_goes_through_the_sdks_permission_flow(project: Path) -> None:
    policy = tg.load_policy_dict({
        "strict_tools": False, "default_effect": "mutating",
        "tools": {"Write": {"effect": "mutating", "requires_approval": True}}})
    agent = ToolGuard(tg.Guard(policy))
    asked: list[tuple[str, str]] = []

    async def can_use_tool(tool: str, args: dict[str, Any], context: Any) -> Any:
        asked.append((args.get("file_path", ""), context.decision_reason or ""))
        if args["file_path"].endswith("yes.txt"):
            return sdk.PermissionResultAllow()
        return sdk.PermissionResultDeny(message="not that one")

    yes, no = project / "yes.txt", project / "no.txt"
    script: list[Any] = [("Write", {"file_path": str(yes), "content": "1"}),
              ("Write", {"file_path": str(no), "content": "2"}), "All done."]
    with FakeAnthropic(script) as fake:
        options = agent.options(_options(project, fake.url, can_use_tool=can_use_tool))
        async with sdk.ClaudeSDKClient(options) as client:
            await client.query("Write the two files.")
            async for _ in client.receive_response():
                pass
        agent.check()
    assert yes.read_text() == "1" and not no.exists()
    assert [path for path, _ in asked] == [str(yes), str(no)]
    assert all("toolguard" in reason and "approval" in reason for _, reason in asked)
