"""A TCP proxy that delays every byte by a fixed time in each direction: a network between
client and Redis, on one machine.

Run as its own process (so its work does not compete with the measured process for the
GIL): ``python tests/redis_delay_proxy.py HOST PORT DELAY_MS``. It listens on a free
loopback port, prints ``port N`` on stdout once it accepts connections, and exits when its
standard input closes (its parent ended or closed the pipe). Each connection gets its own
connection to ``HOST:PORT``; bytes read from either side are written to the other
``DELAY_MS`` milliseconds after they were read (``time.sleep``'s precision: tens of
microseconds late), in order, so a request/reply exchange takes ``2 * DELAY_MS`` longer
than it would directly, and exchanges on different connections overlap as they would on
a real network. Stdlib only: two threads per direction (one reads, one writes when due).

Used by ``tests/stores/test_redis_threads.py`` and ``benchmarks/_redis_bench.py`` through
:class:`tests.redis_support.DelayProxy`.
"""

from __future__ import annotations

import contextlib
import os
import queue
import socket
import sys
import threading
import time


def _pipe(src: socket.socket, dst: socket.socket, delay_s: float) -> None:
    """Copy ``src`` to ``dst``, each chunk ``delay_s`` after it was read; at the end of
    ``src`` (or an error), shut ``dst`` down too."""
    due: queue.SimpleQueue[tuple[float, bytes]] = queue.SimpleQueue()

    def forward() -> None:
        while True:
            at, chunk = due.get()
            if not chunk:
                break
            wait = at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(chunk)
            except OSError:
                break
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=forward, daemon=True).start()
    while True:
        try:
            chunk = src.recv(65536)
        except OSError:
            chunk = b""
        due.put((time.monotonic() + delay_s, chunk))
        if not chunk:
            return


def _serve(host: str, port: int, delay_s: float) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    print(f"port {listener.getsockname()[1]}", flush=True)
    while True:
        client, _ = listener.accept()
        try:
            upstream = socket.create_connection((host, port), timeout=5)
        except OSError:
            client.close()
            continue
        upstream.settimeout(None)
        for sock in (client, upstream):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(src, dst, delay_s), daemon=True).start()


def main() -> None:
    host, port, delay_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])

    def watch_parent() -> None:
        sys.stdin.read()  # returns at EOF: the parent is gone or done with us
        os._exit(0)

    threading.Thread(target=watch_parent, daemon=True).start()
    _serve(host, port, delay_ms / 1000.0)


if __name__ == "__main__":
    main()
