"""Private Redis servers and clusters for fault tests and benchmarks: started here on free
loopback ports (7100-7159 by default), tracked by pid, and stopped at the end (also when a
test fails, and at interpreter exit). The shared server on 6379 is never touched.

``Cluster`` builds a real Redis Cluster with ``redis-cli --cluster create`` (masters, and
optionally one replica each); ``cluster_url()`` is the cluster the store contract suite and
the multi-process tests run on: ``TOOLGUARD_TEST_REDIS_CLUSTER_URL`` when set (``.ci/run``
starts one), otherwise one this module starts for the test session. Under ``CI=true`` a
missing ``redis-server`` fails the tests instead of skipping them.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

PORTS = range(int(os.environ.get("TOOLGUARD_TEST_PORT_MIN", "7100")),
              int(os.environ.get("TOOLGUARD_TEST_PORT_MAX", "7160")))
_started: list[Server] = []
_lock = threading.Lock()


def require_redis_server() -> None:
    """Skip (fail under ``CI=true``) when ``redis-server``/``redis-cli`` are not installed."""
    missing = [b for b in ("redis-server", "redis-cli") if shutil.which(b) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason}; CI=true requires them")
        pytest.skip(reason)


def _free(port: int) -> bool:
    for p in (port, port + 10_000):  # the cluster bus port too
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(("127.0.0.1", p))
            except OSError:
                return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` free ports of :data:`PORTS` (their cluster bus ports free too)."""
    with _lock:
        taken = {s.port for s in _started}
        ports = [p for p in PORTS if p not in taken and _free(p)][:n]
    if len(ports) < n:
        raise RuntimeError(f"fewer than {n} free ports in {PORTS}")
    return ports


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the server gets SIGKILL when the process that started it dies, even by a
    signal that skips ``atexit`` (a killed test run leaves no server behind)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _client(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=2.0,
                       socket_connect_timeout=2.0)


class Server:
    """One ``redis-server`` of ours on 127.0.0.1:``port`` (no persistence unless ``args``
    ask for it). ``kill`` (SIGKILL), ``stall``/``resume`` (SIGSTOP/SIGCONT), ``start`` again
    (same port, same arguments, same directory: an AOF is reloaded), ``stop``."""

    def __init__(self, port: int, *args: str, directory: Path | None = None) -> None:
        self.port = port
        self.args = list(args)
        self.dir = directory or Path(tempfile.mkdtemp(prefix=f"tg-redis-{port}-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Server:
        with _lock:
            if self not in _started:
                _started.append(self)
        # its log says why it exited (a port another run took, a bad option)
        with (self.dir / "server.log").open("ab") as log:
            self.proc = subprocess.Popen(
                ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(self.dir),
                 "--daemonize", "no", *self.args],
                stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None)  # noqa: PLW1509
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited "
                                   f"({self.proc.returncode}): {self._log_tail()}")
            client = _client(self.port)
            try:
                # ours, not another run's server that won the port (ours then exits)
                if int(client.info("server")["process_id"]) == self.proc.pid:
                    return self
                time.sleep(0.02)
            except Exception:  # not up yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
            finally:
                client.close()

    def _log_tail(self) -> str:
        try:
            lines = (self.dir / "server.log").read_text(errors="replace").splitlines()
        except OSError:
            return "no output"
        return " | ".join(line.strip() for line in lines[-2:]) or "no output"

    def client(self) -> Any:
        """A plain redis-py client to this server (for checks)."""
        return _client(self.port)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stall(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and delete its directory."""
        if self.running():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with _lock:
            if self in _started:
                _started.remove(self)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Server:
        return self.start() if not self.running() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def server(*args: str) -> Server:
    """A started private server on a free port (use as a context manager)."""
    require_redis_server()
    return _on_a_free_port(args)


def _on_a_free_port(args: tuple[str, ...]) -> Server:
    """A started server on a free port, trying another port when it loses a race for one
    (another test run on this machine took it between the check and the bind)."""
    last: Exception | None = None
    for _ in range(5):
        candidate = Server(free_ports(1)[0], *args)
        try:
            return candidate.start()
        except RuntimeError as exc:  # lost a race for the port
            last = exc
            candidate.stop()
    raise RuntimeError(f"could not start a private redis-server: {last}")


class Cluster:
    """A real Redis Cluster of ours: ``masters`` masters with ``replicas`` replicas each,
    ``cluster-node-timeout`` of ``node_timeout_ms`` (how soon a dead master fails over)."""

    def __init__(self, masters: int = 3, replicas: int = 0, node_timeout_ms: int = 1000,
                 *args: str) -> None:
        self.masters, self.replicas = masters, replicas
        self.node_timeout_ms = node_timeout_ms
        self.args = args
        self.nodes: list[Server] = []

    @property
    def url(self) -> str:
        """Every node, comma-separated: the startup nodes for ``[store] url``."""
        return ",".join(f"redis://127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> Cluster:
        require_redis_server()
        count = self.masters * (1 + self.replicas)
        try:
            for _ in range(count):  # a node that loses a race for its port takes another
                self.nodes.append(_on_a_free_port((
                    "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms), *self.args)))
            subprocess.run(
                ["redis-cli", "--cluster", "create",
                 *(f"127.0.0.1:{n.port}" for n in self.nodes),
                 "--cluster-replicas", str(self.replicas), "--cluster-yes"],
                check=True, capture_output=True, timeout=60)
            self.wait_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ok(self, timeout_s: float = 30.0) -> None:
        """Until every running node reports ``cluster_state:ok`` and, with replicas, every
        master has its replica attached."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self._ok():
                return
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster did not become ready")
            time.sleep(0.1)

    def _ok(self) -> bool:
        masters = 0
        for node in self.nodes:
            if not node.running():
                continue
            client = node.client()
            try:
                if b"cluster_state:ok" not in client.execute_command("CLUSTER", "INFO"):
                    return False
                info = client.info("replication")
                if info["role"] == "master" and self.replicas:
                    if int(info.get("connected_slaves", 0)) < self.replicas:
                        return False
                    masters += 1
            except Exception:  # still starting
                return False
            finally:
                client.close()
        return not self.replicas or masters >= self.masters

    def master_of(self, key: str) -> Server:
        """The node serving the slot of ``key`` as master right now."""
        from redis.crc import key_slot

        slot = key_slot(key.encode())
        for node in self.nodes:
            if not node.running():
                continue
            client = node.client()
            try:
                for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        port = int(master[1])
                        return next(n for n in self.nodes if n.port == port)
            finally:
                client.close()
        raise RuntimeError(f"no running node serves the slot of {key!r}")

    def node_id(self, node: Server) -> str:
        client = node.client()
        try:
            return str(client.execute_command("CLUSTER", "MYID").decode())
        finally:
            client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


_session: list[Cluster] = []  # the cluster started for this test session, if any


def cluster_url() -> str:
    """The 3-master cluster the contract suite and multi-process tests use: the one named by
    ``TOOLGUARD_TEST_REDIS_CLUSTER_URL``, or one started once for this test session."""
    given = os.environ.get("TOOLGUARD_TEST_REDIS_CLUSTER_URL")
    if given:
        return given
    with _lock:
        if not _session:
            _session.append(Cluster(3))
    cluster = _session[0]
    if not cluster.nodes:
        cluster.start()
    return cluster.url


def stop_session_cluster() -> None:
    while _session:
        _session.pop().stop()


@atexit.register
def _stop_all() -> None:  # a crashed or interrupted run leaves no server behind
    for node in list(_started):
        with contextlib.suppress(Exception):
            node.stop()


@contextlib.contextmanager
def private_server(*args: str) -> Iterator[Server]:
    """A private server for one test, stopped afterwards whatever happens."""
    srv = server(*args)
    try:
        yield srv
    finally:
        srv.stop()
