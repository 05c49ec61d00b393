"""The command a host runs for each hook event: ``python .../toolguard/_hook_client.py HOST
[--policy FILE]`` (what ``toolguard install`` writes).

A host starts a new process per event, and a Python process that loads the guard (pydantic,
the policy loader, the store) pays for that every time. This file therefore imports only the
standard library's socket layer: it hands the event to the user's hook server (a long-lived
``python -m toolguard hook-server``, :mod:`toolguard.hooks._server`, on a Unix socket in the
per-user state directory) and prints its answer. Where no server answers, it starts one in
the background for the next events and answers this event itself, in process
(:func:`toolguard.hooks._hook.main`): the command works the same with or without the server.

Run by path, not ``-m``, so that ``toolguard/__init__`` (the whole library) is not imported
on the way. ``TOOLGUARD_HOOK_SERVER=0`` turns the server off (every event in process).
"""

# os.path and a plain try: pathlib and contextlib are imports this file exists to avoid (it
# runs before every tool call of the agent)
# ruff: noqa: PTH100, PTH109, PTH111, PTH117, PTH118, PTH120, SIM105
import os
import socket
import sys

ENV_PREFIXES = ("TOOLGUARD_", "XDG_STATE_HOME", "HOME")
TIMEOUT_S = 55.0  # below the hosts' own default hook timeout (60 s)


def socket_path(env: "dict[str, str] | os._Environ[str]") -> str:
    """The server's socket: ``hook.sock`` in the state directory (as
    :func:`toolguard.hooks._hook.state_dir` finds it)."""
    home = env.get("HOME", "") or os.path.expanduser("~")
    given = env.get("TOOLGUARD_STATE_DIR", "")
    if given:
        base = home + given[1:] if given == "~" or given.startswith("~/") \
            else os.path.expanduser(given)
    else:
        xdg = env.get("XDG_STATE_HOME", "")
        root = xdg if xdg and os.path.isabs(xdg) else os.path.join(home, ".local", "state")
        base = os.path.join(root, "toolguard")
    return os.path.join(base, "hook.sock")


def _ask_server(path: str, request: bytes) -> "bytes | None":
    """The server's answer to ``request``; None if no server listens (the event was not
    delivered). A server that took the event and then failed raises ``OSError``."""
    if not hasattr(socket, "AF_UNIX"):
        return None
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(TIMEOUT_S)
    try:
        try:
            client.connect(path)
        except OSError:
            return None
        client.sendall(request)
        client.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        client.close()


def request(argv: "list[str]", data: bytes, env: "dict[str, str] | os._Environ[str]",
            cwd: str) -> bytes:
    """What the server is sent for one event: the command's arguments, the variables that
    select the policy, the state and the store, its working directory (where relative names
    among them resolve), and the event."""
    import json

    return json.dumps({
        "argv": argv,
        "env": {k: v for k, v in env.items() if k.startswith(ENV_PREFIXES)},
        "cwd": cwd,
        "stdin": data.decode("utf-8", "surrogateescape"),
    }).encode("utf-8", "surrogateescape")


def _start_server() -> None:
    """Start the hook server in the background, detached from this process and the host."""
    import subprocess

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH", "")) if p)
    try:
        subprocess.Popen(
            [sys.executable, "-m", "toolguard.hooks._server"], env=env,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True)
    except OSError:
        pass  # the next event tries again; this one is answered in process


def _lost(data: bytes, why: str) -> int:
    """The server took the event but gave no answer: a tool call is blocked (the guard
    cannot tell what it decided), any other event goes on."""
    import json

    try:
        name = json.loads(data).get("hook_event_name")
    except (ValueError, AttributeError):
        name = None
    pre = name in ("PreToolUse", "BeforeTool")
    sys.stderr.write(f"toolguard: {why} ({'the call is blocked' if pre else 'the agent goes on'})"
                     "\n")
    return 2 if pre else 1


def main() -> int:
    """Answer one event (stdin) through the server, or in process."""
    import json

    argv = sys.argv[1:]
    data = sys.stdin.buffer.read()
    env = os.environ
    use_server = env.get("TOOLGUARD_HOOK_SERVER", "1") != "0"
    if use_server:
        try:
            reply = _ask_server(socket_path(env), request(argv, data, env, os.getcwd()))
        except OSError as exc:
            return _lost(data, f"the hook server took the event and failed ({exc})")
        if reply is not None:
            try:
                answer = json.loads(reply)
                sys.stdout.write(answer["stdout"])
                sys.stderr.write(answer["stderr"])
                return int(answer["code"])
            except (ValueError, KeyError, TypeError):
                return _lost(data, "the hook server's answer is not readable")
        _start_server()
    import io

    from toolguard.hooks._hook import main as in_process

    return in_process(argv, io.BytesIO(data))


if __name__ == "__main__":
    # run by path: this file's directory (toolguard/) is not a place to import from
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    raise SystemExit(main())
