"""Claude Agent SDK: guard every tool call of the agent through the SDK's own in-process hooks
(extra ``agent-toolguard[claude-agent-sdk]``).

::

    agent = ToolGuard(tg.Guard(policy))   # or ToolGuard(): Claude Code's shipped policy
    async for message in agent.query("...", options=ClaudeAgentOptions(...)):
        ...                               # raises tg.Halt if the guard halted the agent

:meth:`ToolGuard.options` adds a hook matcher per event to the options' ``hooks`` (nothing
else changes); :meth:`ToolGuard.query` is ``claude_agent_sdk.query`` with those options. Use
``ClaudeSDKClient(agent.options(options))`` for a client, then :meth:`ToolGuard.check`
after each response. The hooks answer as ``toolguard hook claude-code`` does, on the
two-step call (:meth:`toolguard.Task.begin` before a tool runs, the real result recorded
after), with the pending calls kept in memory:

- **allow / warn**: the tool runs; a warn's notice reaches the model as additional context.
- **cached / block / invalid**: the tool is denied, with the guard's text as the reason the
  model reads.
- **approval** (``requires_approval``, or a retry of a call whose outcome is unknown): the
  hook answers ``ask``, so the SDK's own permission flow decides: your ``can_use_tool``
  callback (streaming mode), or the CLI's permission rules. The guard records the call as
  approved by that flow; a call it refuses never runs.
- **halt**: the agent stops (``continue: false`` with the reason as ``stopReason``; the
  SDK's result message has ``terminal_reason`` ``"hook_stopped"``), and :meth:`query` /
  :meth:`check` raise the :class:`toolguard.Halt` (``RepeatedToolCalls``, ...). A new
  ``query`` in the session (a user message) resumes it, as the seed design says.
- **task id**: the SDK's session id (one task per session); the store is the guard's
  (in memory by default).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

from toolguard import Guard, Halt
from toolguard.engine._pending import PendingCall
from toolguard.hooks._hook import HookError, Session, handle, policy_path
from toolguard.hooks._hosts import HOSTS

from ._common import HaltOnce, require

require("claude-agent-sdk", "claude_agent_sdk")

from claude_agent_sdk import (  # noqa: E402 - after the check that names the extra
    ClaudeAgentOptions,
    HookContext,
    HookInput,
    HookJSONOutput,
    HookMatcher,
    query,
)

__all__ = ["ToolGuard"]

_HOST = HOSTS["claude-code"]


class ToolGuard(HaltOnce):
    """The guard's hooks for the Claude Agent SDK.

    Args:
        guard: the guard (its policy, store, audit sinks). Default: one with Claude Code's
            shipped policy (``claude-code``) and a memory store.

    Attributes:
        guard: the guard. halt: the last halt not yet raised (None when there is none).

    Thread-safety: one event loop; the hooks run on it.
    """

    def __init__(self, guard: Guard | None = None) -> None:
        if guard is None:
            from toolguard import load_policy

            guard = Guard(load_policy(policy_path(_HOST, None, {}), env={}),
                          strict_tools=False)
        self.guard = guard
        self.halt: Halt | None = None
        self._kept: dict[str, PendingCall] = {}

    def options(self, options: ClaudeAgentOptions | None = None) -> ClaudeAgentOptions:
        """``options`` (default ``ClaudeAgentOptions()``) with the guard's hook matchers
        added after the ones it has."""
        options = options or ClaudeAgentOptions()
        hooks: dict[Any, list[HookMatcher]] = {k: list(v) for k, v in
                                               (options.hooks or {}).items()}
        for event in _HOST.events:
            matcher = HookMatcher(matcher="*" if event in _HOST.tool_events else None,
                                  hooks=[self._hook])
            hooks.setdefault(event, []).append(matcher)
        return dataclasses.replace(options, hooks=hooks)

    async def query(self, prompt: Any, *, options: ClaudeAgentOptions | None = None
                    ) -> AsyncIterator[Any]:
        """``claude_agent_sdk.query(prompt=prompt, options=self.options(options))``: its
        messages, then :meth:`check`.

        Raises:
            Halt: the guard halted the agent during this query.
        """
        async for message in query(prompt=prompt, options=self.options(options)):
            yield message
        self.check()

    async def _hook(self, data: HookInput, tool_use_id: str | None, context: HookContext
                    ) -> HookJSONOutput:
        try:
            event = _HOST.parse(json.dumps(data, default=str))
        except HookError:
            return {}  # an event this guard does not take (the SDK has more than the CLI)
        if event.kind == "pre" and not event.call_id and tool_use_id:
            event = dataclasses.replace(event, call_id=tool_use_id)
        session = Session(self.guard, _HOST, event, None, self._kept)
        answer = handle(session, event)
        if isinstance(answer.halted, Halt):
            self.halt = answer.halted
        out = _HOST.render(event, answer) or {}
        if "continue" in out:  # the SDK's Python spelling
            out["continue_"] = out.pop("continue")
        return out  # type: ignore[return-value]  # the CLI's hook output, as the SDK types it
