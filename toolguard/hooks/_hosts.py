"""The hook protocols of the hosts ``toolguard hook`` serves: how each host's event JSON reads
(:meth:`Host.parse`) and how an answer is written (:meth:`Host.render`), its exit codes, and
where ``toolguard install`` writes its configuration.

- Claude Code (the hooks reference, code.claude.com/docs/en/hooks): events ``PreToolUse``,
  ``PostToolUse``, ``PostToolUseFailure``, ``UserPromptSubmit``, ``SessionStart``, ``Stop``,
  ``SessionEnd``, with ``session_id``, ``cwd``, ``tool_name``, ``tool_input``,
  ``tool_use_id``, ``tool_response`` / ``error``. A tool call is denied, asked or given
  context through ``hookSpecificOutput`` (``permissionDecision`` ``deny`` / ``ask``,
  ``permissionDecisionReason``, ``additionalContext``); ``continue: false`` with
  ``stopReason`` stops the agent. Exit 2 blocks (stderr goes to the model), any other
  non-zero exit is an error that does not block. Settings: ``.claude/settings.json``
  (project) or ``~/.claude/settings.json`` (user).
- Codex CLI (its hooks follow Claude Code's event names, input and output; configured as
  ``[[hooks.EVENT]]`` tables in ``.codex/config.toml`` or ``~/.codex/config.toml``): the same
  events and answers, except that ``PreToolUse`` takes no ``continue: false``,
  ``stopReason`` or ``ask``: a halt there is a denial.
- Gemini CLI (docs/hooks in the gemini-cli repository): events ``BeforeTool``,
  ``AfterTool``, ``BeforeAgent``, ``SessionStart``, ``AfterAgent``, ``SessionEnd``; a
  tool call is denied with ``decision: "deny"`` and ``reason``; ``hookSpecificOutput.
  additionalContext`` adds context; ``continue: false`` with ``stopReason`` stops the
  agent (from ``BeforeTool`` too: the call does not run, the model is not asked again, and
  ``gemini -p`` prints "Agent execution stopped by hook: REASON"); exit 2 blocks.
  Settings: ``.gemini/settings.json`` or ``~/.gemini/settings.json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["HOSTS", "Answer", "Event", "HookError", "Host"]


class HookError(Exception):
    """What the hook cannot do, in one line for stderr; ``closed``: block (the failure mode
    is fail closed) rather than let the host go on."""

    def __init__(self, message: str, closed: bool = True) -> None:
        super().__init__(message)
        self.closed = closed


@dataclass(frozen=True)
class Event:
    """One hook event, in the host-neutral shape the host's parser gives.

    Attributes:
        kind: ``pre`` (a tool call is about to run), ``post`` (it ran), ``failed`` (it ran
            and failed), ``unknown`` (it started and was interrupted: whether it did its
            work is unknown), ``prompt`` (a user message), ``start`` (a session starts),
            ``stop`` (the agent finished its turn), ``end`` (the session ends).
        session: the host's session id (the task id).
        cwd: the working directory of the session.
        tool: the tool name (tool events). args: its arguments. call_id: the host's id of
            the tool call ("" when the host gives none: the arguments' hash stands in).
        result: what the tool returned (``post``), its error text (``failed``), or why
            its outcome is unknown (``unknown``).
        name: the host's own name of the event, for messages.
    """

    kind: str
    session: str
    cwd: str = ""
    tool: str = ""
    args: Any = None
    call_id: str = ""
    result: Any = None
    name: str = ""


@dataclass
class Answer:
    """What the hook answers, in the host-neutral shape the host's renderer turns into its
    protocol.

    Attributes:
        deny: the call must not run: the text the model reads. ask: the host's permission
            prompt asks the user: the text it shows. context: a notice for the model, the
            call runs (or ran). halt: stop the agent: the reason shown to the user.
        note: a line for the user only (stderr).
        halted: the :class:`~toolguard.Halt` behind ``halt`` (an in-process host raises it).
    """

    deny: str | None = None
    ask: str | None = None
    context: str | None = None
    halt: str | None = None
    note: str | None = None
    halted: BaseException | None = None


@dataclass(frozen=True)
class Host:
    """One host's hook protocol.

    Attributes:
        name: the command's name for it (``toolguard hook NAME``).
        title: how people call it.
        events: the host's event name -> the neutral kind (:class:`~toolguard.hooks._hook.Event`).
        tool_events: the host's events that take a tool matcher.
        settings: the settings file, relative to the project (``--project``) or the home
            directory (``--user``).
        exit_block / exit_error: the exit codes for "block" and "error, do not block".
        deny_style: ``claude`` (``hookSpecificOutput.permissionDecision``) or ``gemini``
            (a top-level ``decision``).
        failure_fields: where a failed tool's error text is.
        matcher: the tool matcher ``install`` writes (Gemini CLI's is a regular
            expression; None: no matcher, every tool).
        timeout: the hook timeout ``install`` writes, in the host's unit (Gemini CLI:
            milliseconds).
        context_before: the host reads additional context before a tool runs (else a
            warn's notice goes with the tool's result).
        stops: a tool event can stop the agent (``continue: false``, ``stopReason``,
            ``systemMessage``). Codex CLI (0.171.0) refuses ``continue: false`` and
            ``stopReason`` in ``PreToolUse`` ("unsupported"), and a hook whose answer it
            refuses counts as failed, and the call runs: there a halt is a denial with the
            reason, and a ``systemMessage`` (which it takes, as the hook run's warning);
            every later call of the halted session is denied too.
        asks: ``permissionDecision: "ask"`` exists. Codex CLI and Gemini CLI have no
            such answer: a call that needs approval is denied with the command that
            approves it (``toolguard approve``), and runs when the model sends it again
            after that.
        shell_tools: tools whose result text says how the command ended
            (:meth:`outcome`).
    """

    name: str
    title: str
    events: dict[str, str]
    tool_events: frozenset[str]
    settings: str
    exit_block: int = 2
    exit_error: int = 1
    deny_style: str = "claude"
    failure_fields: tuple[str, ...] = ("error", "error_message")
    matcher: str | None = "*"  # the tool matcher of every tool event (None: none given)
    timeout: int = 60  # the hook's timeout, in the host's unit
    context_before: bool = True  # a notice can go to the model before the tool runs
    stops: bool = True  # ``continue: false`` stops the agent from a tool event
    asks: bool = True  # ``permissionDecision: "ask"`` hands the call to the user
    shell_tools: frozenset[str] = frozenset()  # whose result text says how they ended

    def parse(self, data: bytes | str) -> Event:
        """The event in ``data`` (the JSON on stdin).

        Raises:
            HookError: not JSON, not an object, an unknown event, or a field missing.
        """
        try:
            payload = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise HookError(f"the {self.title} hook event on stdin is not JSON ({exc})") \
                from None
        if not isinstance(payload, dict):
            raise HookError(f"the {self.title} hook event on stdin is not a JSON object")
        name = payload.get("hook_event_name")
        kind = self.events.get(name) if isinstance(name, str) else None
        if kind is None:
            known = ", ".join(self.events)
            raise HookError(f"unknown {self.title} hook event {name!r} (known: {known})")
        session = payload.get("session_id")
        if not isinstance(session, str) or not session:
            raise HookError(f"the {name} event has no session_id")
        cwd = payload.get("cwd")
        if kind not in ("pre", "post", "failed"):
            return Event(kind, session, cwd if isinstance(cwd, str) else "", name=str(name))
        tool = payload.get("tool_name")
        if not isinstance(tool, str) or not tool:
            raise HookError(f"the {name} event has no tool_name")
        args = payload.get("tool_input")
        call_id = payload.get("tool_use_id") or payload.get("tool_call_id") or ""
        result: Any = None
        if kind == "post":
            kind, result = self.outcome(tool, payload.get("tool_response"))
        elif kind == "failed" and payload.get("is_interrupt") is True:  # stopped part way
            kind, result = "unknown", _INTERRUPTED
        elif kind == "failed":
            result = next((payload[f] for f in self.failure_fields if payload.get(f)),
                          "the tool failed")
        return Event(kind, session, cwd if isinstance(cwd, str) else "", tool,
                     args if args is not None else {}, str(call_id), result, str(name))

    def outcome(self, tool: str, response: Any) -> tuple[str, Any]:
        """How a tool that ran ended, from the ``tool_response`` the host reports: ``post``
        and the response, ``failed`` and the error, or ``unknown`` and why.

        - A response with ``interrupted: true`` (Claude Code's Bash, stopped by the user or
          a timeout) ran part way: unknown (so is a ``PostToolUseFailure`` with
          ``is_interrupt: true``).
        - Gemini CLI: ``error`` is a failure. Its shell tools put the rest in the text the
          model reads (``run_shell_command``, ``packages/core/src/tools/shell.ts``): a
          command cancelled by the user or by the inactivity timeout, or ended by a
          signal, is unknown; an ``Exit Code: N`` line (only there when N is not 0) is a
          failure.
        - Codex CLI reports its shell's output only, without the exit code: a command that
          failed is recorded as a success (its output still counts for progress).
        """
        if isinstance(response, dict) and response.get("interrupted") is True:
            return "unknown", _INTERRUPTED
        if self.deny_style != "gemini" or not isinstance(response, dict):
            return "post", response
        if response.get("error"):
            return "failed", response["error"]
        if tool not in self.shell_tools:
            return "post", response
        text = _text_of(response.get("llmContent"))
        if text.startswith(_CANCELLED):
            return "unknown", text.partition("\n")[0]
        status = _shell_status(text)
        if "Signal" in status:
            return "unknown", f"the command was ended by signal {status['Signal']}"
        if status.get("Exit Code", "0") != "0":
            return "failed", text
        return "post", response

    def render(self, event: Event | None, answer: Answer) -> dict[str, Any] | None:
        """The JSON to print for ``answer`` to ``event`` (None: print nothing)."""
        name = event.name if event is not None else ""
        out: dict[str, Any] = {}
        specific: dict[str, Any] = {}
        tool_event = event is not None and event.kind in ("pre", "post", "failed", "unknown")
        if answer.halt:
            if self.stops or not tool_event:
                out.update({"continue": False, "stopReason": answer.halt,
                            "systemMessage": answer.halt})
            elif event is not None and event.kind != "pre":
                answer.context = answer.halt  # the model reads why nothing more runs
            else:
                out["systemMessage"] = answer.halt  # the user sees it (a hook warning)
            if event is not None and event.kind == "pre":
                answer.deny = answer.deny or answer.halt  # the call itself does not run
        if answer.ask is not None and not self.asks:
            answer.ask = None  # the host's own approval policy decides
        if answer.deny is not None or answer.ask is not None:
            if self.deny_style == "gemini":
                out.update(decision="deny", reason=answer.deny)
            else:
                specific["permissionDecision"] = "deny" if answer.deny is not None else "ask"
                specific["permissionDecisionReason"] = (
                    answer.deny if answer.deny is not None else answer.ask)
        if answer.context:
            specific["additionalContext"] = answer.context
        if answer.note and not answer.halt and (
                self.stops or not tool_event or (event is not None and event.kind == "pre")):
            out["systemMessage"] = answer.note  # Codex CLI takes it from PreToolUse too
        if specific:
            out["hookSpecificOutput"] = {"hookEventName": name, **specific}
        return out or None

    def settings_path(self, scope: str, project: Path, home: Path) -> Path:
        """The settings file ``toolguard install`` edits for ``scope`` (``user`` or
        ``project``)."""
        return (home if scope == "user" else project) / self.settings


_INTERRUPTED = "the tool was interrupted before it finished"
_CANCELLED = ("Command was cancelled", "Command was automatically cancelled")
_STATUS_LINE = re.compile(r"(Error|Exit Code|Signal|Background PIDs|Process Group PGID): (.*)")


def _text_of(content: Any) -> str:
    """The text of Gemini CLI's ``llmContent``: a string, or parts with ``text``."""
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    return "\n".join(str(p["text"]) for p in parts if isinstance(p, dict) and "text" in p)


def _shell_status(text: str) -> dict[str, str]:
    """The status lines Gemini CLI's shell tool writes after a command's output (``Output:
    ...`` first, then ``Error``, ``Exit Code``, ``Signal``, ``Background PIDs``, ``Process
    Group PGID``, each only when it has something to say): read from the end, so the
    command's own output cannot stand in for them unless it ends with one."""
    status: dict[str, str] = {}
    for line in reversed(text.splitlines()):
        found = _STATUS_LINE.fullmatch(line)
        if found is None or found[1] in status:
            break
        status[found[1]] = found[2]
    return status


_CLAUDE_EVENTS = {
    "PreToolUse": "pre", "PostToolUse": "post", "PostToolUseFailure": "failed",
    "UserPromptSubmit": "prompt", "SessionStart": "start", "Stop": "stop",
    "SessionEnd": "end",
}

HOSTS: dict[str, Host] = {
    "claude-code": Host(
        "claude-code", "Claude Code", _CLAUDE_EVENTS,
        frozenset({"PreToolUse", "PostToolUse", "PostToolUseFailure"}),
        ".claude/settings.json"),
    "codex": Host(
        "codex", "Codex CLI",
        {k: v for k, v in _CLAUDE_EVENTS.items() if k not in ("PostToolUseFailure",
                                                               "SessionEnd")},
        frozenset({"PreToolUse", "PostToolUse"}), ".codex/config.toml", matcher=None,
        stops=False, asks=False),
    "gemini": Host(
        "gemini", "Gemini CLI",
        {"BeforeTool": "pre", "AfterTool": "post", "BeforeAgent": "prompt",
         "SessionStart": "start", "AfterAgent": "stop", "SessionEnd": "end"},
        frozenset({"BeforeTool", "AfterTool"}), ".gemini/settings.json",
        deny_style="gemini", matcher=".*", timeout=60_000, context_before=False,
        asks=False, shell_tools=frozenset({"run_shell_command"})),
}
