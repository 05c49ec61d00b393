"""One-line integrations with agent frameworks, one module per framework.

====================  ================================  ====================================
toolguard.adapters.   what you add                      extra
====================  ================================  ====================================
``langchain``         ``ToolGuardMiddleware(guard)``    ``agent-toolguard[langchain]``
                      ``guard_tools(guard, tools)``
``openai_agents``     ``guard_tools(guard, tools)``     ``agent-toolguard[openai-agents]``
``pydantic_ai``       ``ToolGuard(guard)``              ``agent-toolguard[pydantic-ai]``
``mcp``               ``guard_server(server, guard)``   ``agent-toolguard[mcp]``
``claude_agent_sdk``  ``ToolGuard(guard).query(...)``   ``agent-toolguard[claude-agent-sdk]``
``google_adk``        ``ToolGuard(guard)`` (a plugin)   ``agent-toolguard[google-adk]``
``strands``           ``ToolGuard(guard)`` (hooks)      ``agent-toolguard[strands]``
``smolagents``        ``guard_agent(agent, guard)``     ``agent-toolguard[smolagents]``
``autogen``           ``guarded.workbench(tools)``      ``agent-toolguard[autogen]``
                      ``guarded.context()``
``crewai``            ``ToolGuard(guard)`` (hooks)      ``agent-toolguard[crewai]``
``llama_index``       ``ToolGuard(guard).wrap(tools)``  ``agent-toolguard[llama-index]``
====================  ================================  ====================================

Each module imports its framework when it is imported (never before: ``import toolguard``
and this package import no framework), and raises an :class:`ImportError` naming the extra
when the framework is missing. Every adapter dispatches each tool call the framework runs
through ``task.call`` / ``task.acall`` with ``run=`` set to the framework's own execution, so
the framework still validates, injects and runs the tool, and the guard decides, records and
audits it. How each one surfaces a halt, asks for approval and finds its task id is in its
module docstring.
"""
