"""The hook server: one long-lived process per user that answers the hook events of every
host session on this machine, so that an event costs a socket round trip instead of loading
the guard (``python -m toolguard.hooks._server``; :mod:`toolguard._hook_client` starts it).

It listens on ``hook.sock`` in the per-user state directory (created ``0700``; its process id
in ``hook.pid``), answers each connection in a thread with
:func:`toolguard.hooks._hook.main`, in the hook command's own working directory (a relative
policy, state directory or ``sqlite:///`` URL resolves as it would in the command), and exits
after ``TOOLGUARD_HOOK_SERVER_IDLE_S`` seconds without an event (default 1800). All state is
in the store and the state directory, as for an event answered in process: the server keeps
nothing a restart would lose. The guards it builds are kept under the working directory,
the policy file and its modification time (an edited policy is read again), and their
SQLite connections in a small pool (a few descriptors, however many events).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import socketserver
import sys
import threading
import time
from pathlib import Path

from toolguard._hook_client import socket_path

from ._hook import main as answer

IDLE_S = 1800.0


class _Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.server.touched = time.monotonic()
        request = json.loads(self.rfile.read())
        stdout, stderr = io.StringIO(), io.StringIO()
        try:
            code = answer(list(request["argv"]),
                          io.BytesIO(request["stdin"].encode("utf-8", "surrogateescape")),
                          stdout, stderr, dict(request["env"]), str(request["cwd"]))
        except BaseException as exc:  # noqa: BLE001 - answered, never a dead connection
            stderr.write(f"toolguard: internal error in the hook server: "
                         f"{type(exc).__name__}: {exc}\n")
            code = 2
        self.wfile.write(json.dumps({"stdout": stdout.getvalue(), "stderr": stderr.getvalue(),
                                     "code": code}).encode("utf-8", "surrogateescape"))
        self.server.touched = time.monotonic()


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    touched = 0.0


def _taken(path: str) -> bool:
    """Whether a server answers on ``path`` already."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def serve(path: str, idle_s: float) -> None:
    """Serve on ``path`` until ``idle_s`` seconds pass without an event."""
    Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if _taken(path):
        return
    Path(path).unlink(missing_ok=True)
    old = os.umask(0o077)  # the socket: this user only
    try:
        server = _Server(path, _Handler)
    finally:
        os.umask(old)
    server.touched = time.monotonic()
    pid_file = Path(path).with_suffix(".pid")
    pid_file.write_text(f"{os.getpid()}\n", "utf-8")

    def watch() -> None:
        while time.monotonic() - server.touched < idle_s:
            time.sleep(min(5.0, idle_s))
        server.shutdown()

    threading.Thread(target=watch, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.server_close()
        if not _taken(path):  # not a newer server's socket
            with contextlib.suppress(OSError):
                Path(path).unlink(missing_ok=True)
                pid_file.unlink(missing_ok=True)


def main() -> None:
    env = os.environ
    idle = float(env.get("TOOLGUARD_HOOK_SERVER_IDLE_S", IDLE_S))
    serve(socket_path(env), idle)


if __name__ == "__main__":
    main()
    sys.exit(0)
