"""Real-Redis test support: where the server is, fixtures that own a key prefix, and a TCP
proxy that injects faults without disturbing the shared server.

The server is ``TOOLGUARD_TEST_REDIS_URL`` (default ``redis://127.0.0.1:6379/15``: a
dedicated database). Every test gets its own key prefix and deletes only keys under it. If
the server is unreachable, Redis tests skip with the reason, or fail when ``CI=true``.
The cluster (``redis_cluster_store``, ``require_cluster``) is the 3-master Redis Cluster of
``redis_servers.cluster_url()``: ``.ci/run``'s, or one started for the test session.

Use the fixtures by importing them into a test module::

    from .redis_support import redis_prefix, redis_store  # noqa: F401
"""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from toolguard.stores.redis import RedisStore

REDIS_URL = os.environ.get("TOOLGUARD_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
_POLL_S = 0.05  # the proxy's socket timeout: how quickly it notices a mode change


def missing_extra(exc: ImportError) -> NoReturn:
    """A Redis test module whose ``redis`` extra is missing: fail under ``CI=true``, where
    the extras' tests must run, and skip the module elsewhere, with the reason."""
    if os.environ.get("CI") == "true":
        raise exc
    pytest.skip(str(exc), allow_module_level=True)


@functools.cache
def _unreachable() -> str | None:
    try:
        from toolguard.stores.redis import unreachable
    except ImportError as exc:  # redis-py missing: the message names the extra
        return str(exc)
    return unreachable(REDIS_URL)


def require_redis() -> str:
    """The test server's URL; skips the test (fails it when ``CI=true``) if unreachable."""
    reason = _unreachable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it (set TOOLGUARD_TEST_REDIS_URL)")
        pytest.skip(reason)
    return REDIS_URL


def delete_prefix(prefix: str) -> int:
    """Delete every key under ``prefix:`` on the test server; return how many."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5.0)
    try:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        return int(client.delete(*keys)) if keys else 0
    finally:
        client.close()


def new_prefix() -> str:
    """A key prefix no other test uses (hex only: no glob characters)."""
    return f"tgtest:{uuid.uuid4().hex}"


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A fresh key prefix on the test server; its keys are deleted afterwards."""
    require_redis()
    prefix = new_prefix()
    yield prefix
    delete_prefix(prefix)


@pytest.fixture
def redis_store(redis_prefix: str) -> Iterator[RedisStore]:
    """A :class:`RedisStore` on the test server under a fresh key prefix."""
    from toolguard.stores.redis import RedisStore

    store = RedisStore(url=REDIS_URL, key_prefix=redis_prefix, timeout_s=5.0)
    yield store
    store.close()


def require_cluster() -> str:
    """The test cluster's startup nodes (comma-separated URLs); skips the test (fails it
    when ``CI=true``) if no cluster can be reached or started."""
    from .redis_servers import cluster_url

    try:
        url = cluster_url()
        from toolguard.stores.redis import unreachable

        reason = unreachable(url, 2.0, cluster=True)
    except (ImportError, OSError, RuntimeError) as exc:
        reason = f"no Redis Cluster: {type(exc).__name__}: {exc}"
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires it")
        pytest.skip(reason)
    return url


def delete_cluster_prefix(url: str, prefix: str) -> None:
    """Delete every key under ``prefix:`` on every master of the cluster at ``url``."""
    from toolguard.stores.redis import RedisStore

    store = RedisStore(url=url, cluster=True, timeout_s=5.0)
    client = store.client
    try:
        for key in list(client.scan_iter(match=f"{prefix}:*", count=1000)):
            client.delete(key)
    finally:
        store.close()


@pytest.fixture
def redis_cluster_store() -> Iterator[RedisStore]:
    """A :class:`RedisStore` on the test cluster under a fresh key prefix."""
    from toolguard.stores.redis import RedisStore

    url = require_cluster()
    prefix = new_prefix()
    store = RedisStore(url=url, cluster=True, key_prefix=prefix, timeout_s=5.0)
    yield store
    store.close()
    delete_cluster_prefix(url, prefix)


class FaultProxy:
    """A TCP proxy to the test server on ``127.0.0.1:port``.

    ``cut()`` drops every connection and refuses new ones (Redis unreachable), ``stall()``
    keeps connections open but forwards nothing (Redis hanging: commands time out),
    ``restore()`` forwards again. Bytes held during a stall are dropped by the next ``cut()``.
    Use as a context manager; threads are daemons and every socket error ends a pump quietly.
    """

    def __init__(self) -> None:
        target = urlsplit(REDIS_URL)
        self._target = (target.hostname or "127.0.0.1", target.port or 6379)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(_POLL_S)
        self.port: int = self._server.getsockname()[1]
        self._mode = "pass"
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    @property
    def url(self) -> str:
        """The test server's URL with the proxy's address."""
        return urlsplit(REDIS_URL)._replace(netloc=f"127.0.0.1:{self.port}").geturl()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def cut(self) -> None:
        """Close every connection; refuse new ones until :meth:`restore`."""
        with self._lock:
            self._mode = "cut"
            self._close_all()

    def stall(self) -> None:
        """Stop forwarding (connections stay open). Returns once every pump is parked: a
        pump inside ``recv`` when this is called still forwards what that ``recv`` returns."""
        with self._lock:
            self._mode = "stall"
        time.sleep(2 * _POLL_S)

    def restore(self) -> None:
        """Forward again."""
        with self._lock:
            self._mode = "pass"

    def close(self) -> None:
        """Stop the proxy and close everything."""
        self._stop.set()
        with self._lock:
            self._close_all()
        self._server.close()
        for thread in self._threads:
            thread.join(timeout=2)

    def _close_all(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._sockets.clear()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                if self._mode == "cut":
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(self._target, timeout=2)
                except OSError:
                    client.close()
                    continue
                for sock in (client, upstream):
                    sock.settimeout(_POLL_S)
                    self._sockets.append(sock)
                for src, dst in ((client, upstream), (upstream, client)):
                    thread = threading.Thread(target=self._pump, args=(src, dst), daemon=True)
                    self._threads.append(thread)
                    thread.start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        while not self._stop.is_set():
            if self._mode != "pass":
                if src.fileno() < 0:
                    return
                time.sleep(0.005)
                continue
            try:
                data = src.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                break
            try:
                dst.sendall(data)
            except OSError:
                return
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


class DelayProxy:
    """A network delay between a client and a Redis server: ``tests/redis_delay_proxy.py``
    run as a child process (not a thread, so its work does not take the GIL from the
    threads being measured), forwarding each byte ``delay_s`` seconds after it arrives, in
    each direction: every round trip takes at least ``2 * delay_s`` longer.

    ``url`` is ``target`` (default: the test server) with the proxy's address. Use as a
    context manager; the child exits when this object closes its standard input (or this
    process dies).

    Raises:
        RuntimeError: the proxy did not start.
    """

    def __init__(self, delay_s: float, target: str = REDIS_URL) -> None:
        import subprocess
        import sys
        from pathlib import Path

        parts = urlsplit(target)
        self._target = parts
        script = Path(__file__).with_name("redis_delay_proxy.py")
        self._proc = subprocess.Popen(
            [sys.executable, str(script), parts.hostname or "127.0.0.1",
             str(parts.port or 6379), repr(delay_s * 1000.0)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line.startswith("port "):
            self.close()
            raise RuntimeError(f"the delay proxy did not start (said {line!r})")
        self.port = int(line.split()[1])
        self.delay_s = delay_s

    @property
    def url(self) -> str:
        """The target's URL with the proxy's address."""
        return self._target._replace(netloc=f"127.0.0.1:{self.port}").geturl()

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the proxy (its connections close)."""
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(timeout=5)
        except Exception:  # it did not exit on EOF: make it
            self._proc.kill()
            self._proc.wait(timeout=5)
        if self._proc.stdout is not None:
            self._proc.stdout.close()


def write_and_lookup(ran: list[str]) -> list[Any]:
    """A mutating ``write(path)`` that appends each path it runs for to ``ran``, and a
    read-only ``lookup(q)``: the two tools the Redis round-trip tests count."""
    import toolguard as tg

    @tg.mutating
    def write(path: str) -> str:
        ran.append(path)
        return f"wrote {path}"

    @tg.readonly
    def lookup(q: str) -> str:
        return q

    return [write, lookup]
