"""Timeouts of HTTP and RPC clients leave the outcome unknown: an identical retry is not re-run
blindly. The requests and httpx timeouts are raised for real, by the
clients themselves against a loopback server that takes the request and never answers."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
import requests

import toolguard as tg
from toolguard._outcomes import DEFAULT_TIMEOUT_EXCEPTIONS, OutcomeUnknown, is_unknown_outcome
from toolguard.policy._model import IdempotencyPolicy
from toolguard.testing import FakeClock, auto_defer

D = tg.Decision


@pytest.fixture
def silent_bank() -> Iterator[tuple[str, list[bytes]]]:
    """A loopback HTTP 'bank' that records each request and never answers in time."""
    received: list[bytes] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    open_conns: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            open_conns.append(conn)
            data = conn.recv(65536)
            if data:
                received.append(data.split(b"\r\n", 1)[0])

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", received
    stop.set()
    server.close()
    for conn in open_conns:
        conn.close()
    thread.join(5)


@pytest.mark.parametrize("client", ["requests", "httpx"])
def test_a_real_http_client_timeout_is_an_unknown_outcome(
        client: str, silent_bank: tuple[str, list[bytes]], clock: FakeClock) -> None:
    """Regression: requests.ReadTimeout and httpx.ReadTimeout are not TimeoutError, so the
    retry of a payment the server already took paid again."""
    url, received = silent_bank

    @tg.mutating
    def pay(order: str) -> str:
        if client == "requests":
            return requests.post(f"{url}/pay/{order}", timeout=0.2).text
        return httpx.post(f"{url}/pay/{order}", timeout=0.2).text

    task = tg.Guard(tools=[pay], approver=auto_defer, clock=clock).task("t")
    first = task.call("pay", {"order": "o-1"})
    assert first.is_error and "outcome is unknown" in str(first.content)
    retry = task.call("pay", {"order": "o-1"})
    assert retry.decision is D.REVIEW and not retry.executed
    assert len(received) == 1  # the bank was paid once


def _exception(module: str, qualname: str, *bases: type[BaseException]) -> type[BaseException]:
    cls = type(qualname.rpartition(".")[2], bases or (Exception,), {})
    cls.__module__, cls.__qualname__ = module, qualname
    return cls


class _Status:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_default_families_match_by_hierarchy_without_importing() -> None:
    """Classes spelled as the clients define them (the packages need not be installed)."""
    names = DEFAULT_TIMEOUT_EXCEPTIONS
    urllib3_timeout = _exception("urllib3.exceptions", "TimeoutError")
    read_timeout_error = _exception("urllib3.exceptions", "ReadTimeoutError", urllib3_timeout)
    server_timeout = _exception("aiohttp.client_exceptions", "ServerTimeoutError", TimeoutError)
    future_timeout = _exception("grpc", "FutureTimeoutError")
    rpc_error = _exception("grpc", "RpcError")
    inactive = _exception("grpc._channel", "_InactiveRpcError", rpc_error)

    def rpc(status: str) -> BaseException:
        exc = inactive()
        exc.code = lambda: _Status(status)  # type: ignore[attr-defined]
        return exc

    assert is_unknown_outcome(read_timeout_error(), names)
    assert is_unknown_outcome(server_timeout(), names)
    assert is_unknown_outcome(future_timeout(), names)
    assert is_unknown_outcome(socket.timeout("read"), names)  # noqa: UP041 - the alias on purpose
    assert is_unknown_outcome(rpc("DEADLINE_EXCEEDED"), names)
    assert not is_unknown_outcome(rpc("UNAVAILABLE"), names)  # a known failure
    assert not is_unknown_outcome(requests.exceptions.ConnectionError(), names)
    assert not is_unknown_outcome(httpx.ConnectError("refused"), names)
    assert not is_unknown_outcome(ValueError("x"), names)


@pytest.mark.parametrize("name", [
    "requests.exceptions.Timeout",  # where it is defined
    "requests.Timeout",  # the public re-export: a submodule of requests defines it
    "Timeout",  # a bare name
])
def test_timeout_exceptions_match_subclasses_by_qualified_name(name: str) -> None:
    assert is_unknown_outcome(requests.exceptions.ReadTimeout(), (name,))
    assert is_unknown_outcome(requests.exceptions.ConnectTimeout(), (name,))
    assert not is_unknown_outcome(requests.exceptions.ConnectionError(), (name,))


def test_a_dotted_name_does_not_match_a_look_alike_elsewhere() -> None:
    other = _exception("myapp.errors", "Timeout")
    assert not is_unknown_outcome(other(), ("requests.exceptions.Timeout",))
    assert not is_unknown_outcome(other(), ("requests.Timeout",))
    prefix = _exception("requestsx.errors", "Timeout")  # a module prefix, not a package
    assert not is_unknown_outcome(prefix(), ("requests.Timeout",))


def test_a_policy_list_replaces_the_defaults(clock: FakeClock) -> None:
    ran: list[int] = []

    @tg.mutating
    def pay(amount: int) -> str:
        ran.append(amount)
        raise httpx.ReadTimeout("slow")

    policy = tg.Policy(idempotency=IdempotencyPolicy(timeout_exceptions=("OnlyMine",)))
    task = tg.Guard(policy, [pay], approver=auto_defer, clock=clock).task("t")
    task.call("pay", {"amount": 1})
    assert task.call("pay", {"amount": 1}).executed and ran == [1, 1]


def test_the_default_is_in_the_policy_model_and_schema() -> None:
    assert tg.Policy().idempotency.timeout_exceptions == DEFAULT_TIMEOUT_EXCEPTIONS
    loaded = tg.load_policy_dict({"idempotency": {"timeout_exceptions": ["httpx.ReadTimeout"]}})
    assert loaded.idempotency.timeout_exceptions == ("httpx.ReadTimeout",)


def test_a_call_lost_on_its_way_is_unknown_whatever_the_policy_lists(clock: FakeClock) -> None:
    """A runner that lost a call it handed on (the MCP proxy's upstream died, or did not
    answer in time) raises OutcomeUnknown: no list of timeout names makes that "not run"."""
    ran: list[int] = []

    @tg.mutating
    def pay(amount: int) -> str:
        ran.append(amount)
        raise OutcomeUnknown("the server that ran it went away")

    assert is_unknown_outcome(OutcomeUnknown(), ())
    policy = tg.Policy(idempotency=IdempotencyPolicy(timeout_exceptions=("OnlyMine",)))
    task = tg.Guard(policy, [pay], approver=auto_defer, clock=clock).task("t")
    assert "outcome is unknown" in str(task.call("pay", {"amount": 1}).content)
    assert task.call("pay", {"amount": 1}).decision is D.REVIEW and ran == [1]
