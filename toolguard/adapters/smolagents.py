"""smolagents: guard every tool call of a ``ToolCallingAgent`` (extra
``agent-toolguard[smolagents]``).

::

    agent = guard_agent(ToolCallingAgent(tools=tools, model=model), guard)  # raises tg.Halt

:func:`guard_agent` wraps the agent's ``execute_tool_call`` (smolagents' own step that
validates and runs one tool call): every call goes through ``task.call`` with ``run=`` set
to it, so smolagents still validates, substitutes state variables and runs the tool.

- **allow**: the tool's return value. **warn / cached**: the guard's text (the value, or
  the stored result, with the notice); a cached write does not run again.
- **block / invalid / review / a failed call**: raised as smolagents'
  ``AgentToolExecutionError`` with the guard's text: the model reads it as the step's error
  and the run goes on.
- **approval**: smolagents has no confirmation step of its own: pass ``approver=`` (your
  human in the loop, as for ``task.call``); without one, a call that needs approval is
  blocked (fail closed) and never runs.
- **halt**: the :class:`toolguard.Halt` leaves ``agent.run`` unchanged (smolagents catches
  only its own ``AgentError``). Resume with ``task.resume()`` and ``agent.run(...,
  reset=False)``.
- **CodeAgent**: its tools are called from generated Python code, outside any call the
  guard sees: :func:`guard_agent` refuses it with a :class:`TypeError`, rather than leave
  them unguarded.
- **task id**: ``task_id=``, else the agent's ``name``, else ``"smolagents"``.
"""

from __future__ import annotations

from typing import Any, TypeVar

from toolguard import Decision, Guard
from toolguard.engine._approval import Approver

from ._common import known, require

require("smolagents", "smolagents")

from smolagents import CodeAgent, MultiStepAgent, ToolCallingAgent  # noqa: E402
from smolagents.utils import AgentToolExecutionError  # noqa: E402

__all__ = ["guard_agent"]

A = TypeVar("A", bound=MultiStepAgent)

_FINAL = "final_answer"  # smolagents' own way to end the run: not a tool call to guard


def guard_agent(agent: A, guard: Guard, *, task_id: str | None = None,
                approver: Approver | None = None) -> A:
    """``agent`` with every tool call it makes sent through ``guard`` (in place; returned).

    Args:
        agent: a smolagents ``ToolCallingAgent`` (or a subclass).
        guard: the :class:`toolguard.Guard` (effects by tool name, from the policy).
        task_id: the task id; default the agent's ``name``, else ``"smolagents"``.
        approver: asked for calls that need approval (as for ``task.call``).

    Returns:
        ``agent``; its task is ``agent.toolguard_task``.

    Raises:
        TypeError: ``agent`` is a ``CodeAgent`` (its generated code calls the tools
            directly, where no guard can see them), or not a ``ToolCallingAgent``.
    """
    if isinstance(agent, CodeAgent):
        raise TypeError(
            "toolguard cannot guard a smolagents CodeAgent: its generated code calls the "
            "tools directly, outside any call the guard sees. Use a ToolCallingAgent.")
    if not isinstance(agent, ToolCallingAgent):
        raise TypeError(f"guard_agent takes a smolagents ToolCallingAgent, got "
                        f"{type(agent).__name__}")
    task = guard.task(task_id or getattr(agent, "name", None) or "smolagents")
    original = agent.execute_tool_call
    for name, tool in agent.tools.items():
        if name != _FINAL:
            known(guard, name, name, args_schema=_schema(tool.inputs),
                  description=tool.description or "")

    def execute_tool_call(tool_name: str, arguments: dict[str, str] | str) -> Any:
        if tool_name == _FINAL or tool_name in agent.managed_agents:
            return original(tool_name, arguments)
        result = task.call(tool_name, arguments if isinstance(arguments, dict) else {},
                           run=lambda args: original(tool_name, args), approver=approver)
        if result.is_error or result.decision is Decision.REVIEW:
            raise AgentToolExecutionError(str(result.content), agent.logger)
        return result.value if result.notice is None else result.content

    agent.execute_tool_call = execute_tool_call
    agent.toolguard_task = task
    return agent


def _schema(inputs: dict[str, Any]) -> dict[str, Any]:
    """A smolagents tool's ``inputs`` as JSON Schema."""
    props = {name: {k: v for k, v in spec.items() if k == "type" and v != "any"}
             for name, spec in inputs.items()}
    required = [name for name, spec in inputs.items() if not spec.get("nullable")]
    return {"type": "object", "properties": props, "required": required}

