"""SQLiteStore beyond the shared contract (``test_store_contract.py`` runs it there): chosen
by a policy or the environment, several real processes serving one task (no duplicate
execution, exact budgets, a crashed worker's claim), a process per call as a hook command
runs, a file that is corrupt, foreign or locked, the size bounds and the per-user file."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import toolguard as tg
from tests.process_support import (
    budget_worker,
    check_budget,
    check_crashed_claim_is_unknown,
    check_same_call,
    logged,
    run_processes,
    same_call_worker,
)
from toolguard.policy._model import IdempotencyPolicy
from toolguard.stores import BeginRequest, FinishRequest
from toolguard.stores.sqlite import SQLiteStore, default_path, path_from_url
from toolguard.testing import FakeClock, capture_audit

TASK = "t"


# -- chosen by a policy or the environment -----------------------------------------------
def test_a_sqlite_url_in_a_policy_file_selects_it(tmp_path: Path) -> None:
    db = tmp_path / "state dir" / "state.db"
    policy_file = tmp_path / "policy.toml"
    policy_file.write_text(f'[store]\nurl = "sqlite:///{db}"\ntimeout_s = 2.5\n'
                           'on_error = "fail_open"\n')
    store = tg.Guard(str(policy_file)).store
    assert isinstance(store, SQLiteStore)
    assert (store.path, store.on_error) == (db, "fail_open")
    store.new_turn(TASK)
    assert db.is_file()
    store.close()


def test_the_environment_selects_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "env.db"
    store = tg.Guard.from_env(env={"TOOLGUARD_STORE__URL": f"sqlite:///{db}"}).store
    assert isinstance(store, SQLiteStore) and store.path == db
    monkeypatch.setenv("TOOLGUARD_STATE_DIR", str(tmp_path / "state"))
    store = tg.Guard.from_env(env={"TOOLGUARD_STORE__BACKEND": "sqlite"}).store
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "state" / "state.db"


def test_a_relative_url_is_relative_to_the_working_directory(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    monkeypatch.chdir(tmp_path)
    store = tg.Guard(tg.load_policy_dict({"store": {"url": "sqlite:///rel/s.db"}})).store
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "rel" / "s.db"


@pytest.mark.parametrize(("store", "message"), [
    ({"backend": "redis", "url": "sqlite:///x.db"},
     r'a SQLite URL is set, but store.backend = "redis"'),
    ({"backend": "sqlite", "url": "redis://127.0.0.1:6379/0"},
     r'a Redis URL is set, but store.backend = "sqlite"'),
    ({"backend": "memory", "url": "sqlite:///x.db"},
     r'a SQLite URL is set, but store.backend = "memory".*drop the URL'),
    ({"url": "sqlite:///:memory:"}, r"store.url.*in-memory database"),
    ({"url": "sqlite://host/x.db"}, r"store.url.*no host"),
])
def test_a_url_the_backend_cannot_use_is_a_policy_error(store: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(tg.PolicyError, match=message):
        tg.Guard(tg.load_policy_dict({"store": store}))


def test_memory_stays_the_default() -> None:
    assert isinstance(tg.Guard().store, tg.stores.MemoryStore)


def test_url_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TOOLGUARD_STATE_DIR", str(tmp_path / "st"))
    assert path_from_url("sqlite:///a/b.db") == Path("a/b.db")
    assert path_from_url("sqlite:////var/lib/tg.db") == Path("/var/lib/tg.db")
    assert path_from_url("sqlite:///~/tg.db") == tmp_path / "tg.db"
    assert path_from_url("sqlite:///with%20space.db") == Path("with space.db")
    assert path_from_url("sqlite://") == tmp_path / "st" / "state.db"
    for bad in ("sqlite:///", "redis://x", "sqlite:///x.db?mode=ro", "sqlite:///:memory:"):
        with pytest.raises(ValueError, match="sqlite"):
            path_from_url(bad)


def test_default_path_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_path({}) == tmp_path / ".local/state/toolguard/state.db"
    assert default_path({"XDG_STATE_HOME": "/xdg"}) == Path("/xdg/toolguard/state.db")
    # the XDG spec: a relative path is invalid and ignored
    assert default_path({"XDG_STATE_HOME": "rel"}) == tmp_path / ".local/state/toolguard/state.db"
    assert default_path({"XDG_STATE_HOME": "/xdg", "TOOLGUARD_STATE_DIR": "/over"}) == Path(
        "/over/state.db")


def test_default_path_reads_home_from_the_environment_given(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the hook server answers for hook commands whose HOME is not its own
    monkeypatch.setenv("HOME", str(tmp_path / "server"))
    client = {"HOME": str(tmp_path / "client")}
    assert default_path(client) == tmp_path / "client/.local/state/toolguard/state.db"
    assert default_path({**client, "TOOLGUARD_STATE_DIR": "~/x"}) == tmp_path / "client/x/state.db"
    assert default_path({"TOOLGUARD_STATE_DIR": "~/x"}) == tmp_path / "server/x/state.db"


def test_the_file_is_private_to_its_user(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "new" / "dir" / "state.db")
    store.new_turn(TASK)
    store.close()
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "new" / "dir" / "state.db").stat().st_mode) == 0o600


# -- several processes, one task -------------------------------------------------------
# Four processes take turns on the file's lock: on a machine busy with other work a turn can
# wait longer than the store's default 5 s, which these tests are not about.
LOCK_WAIT_S = 60.0


def _shared(tmp_path: Path) -> functools.partial[SQLiteStore]:
    return functools.partial(SQLiteStore, tmp_path / "state.db", timeout_s=LOCK_WAIT_S)


def test_four_processes_same_call_execute_once(tmp_path: Path) -> None:
    make, log = _shared(tmp_path), str(tmp_path / "log")
    out = run_processes(same_call_worker, [(make, log, True)] * 4)
    check_same_call(out, log, ladder=True)


def test_four_processes_same_call_default_ladder(tmp_path: Path) -> None:
    make, log = _shared(tmp_path), str(tmp_path / "log")
    out = run_processes(same_call_worker, [(make, log, False)] * 4)
    check_same_call(out, log, ladder=False)


def test_budget_shared_by_four_processes(tmp_path: Path) -> None:
    make, log = _shared(tmp_path), str(tmp_path / "log")
    out = run_processes(budget_worker, [(make, log, i) for i in range(4)])
    check_budget(out, log)


def test_crashed_workers_claim_is_an_unknown_outcome(tmp_path: Path) -> None:
    check_crashed_claim_is_unknown(_shared(tmp_path))


_ONE_CALL = """
import sys, toolguard as tg
from collections.abc import Iterator
from pathlib import Path

@tg.mutating
def write(path: str) -> str:
    with open(sys.argv[2], "a") as log:
        log.write(path + "\\n")
    return "wrote " + path

@tg.readonly
def read(path: str) -> str:
    return "same text"

guard = tg.Guard.from_env([write, read])
try:
    print(guard.task("session-1").call(sys.argv[1], {"path": "a.txt"}).decision)
except tg.Halt as exc:
    print(type(exc).__name__)
"""


def test_a_process_per_call_shares_the_task(tmp_path: Path) -> None:
    """A hook command is a new process per event: the ladder and the idempotency record
    carry over through the file."""
    log = tmp_path / "writes"
    env = {**os.environ, "TOOLGUARD_STORE__URL": f"sqlite:///{tmp_path / 'state.db'}"}

    def call(tool: str) -> str:
        done = subprocess.run([sys.executable, "-c", _ONE_CALL, tool, str(log)], env=env,
                              capture_output=True, text=True, timeout=60, check=True)
        return done.stdout.strip()

    assert [call("write") for _ in range(2)] == ["allow", "cached"]
    assert logged(str(log)) == ["a.txt"]
    assert [call("read") for _ in range(5)] == ["allow", "allow", "warn", "block",
                                                "RepeatedToolCalls"]


# -- a file that is not usable -----------------------------------------------------------
@tg.mutating
def pay(order: str) -> str:
    return f"paid {order}"


def _refused(db: Path, match: str, **kwargs: Any) -> None:
    store = SQLiteStore(db, **kwargs)
    with pytest.raises(tg.StoreError, match=match) as caught:
        tg.Guard(tools=[pay], store=store).task(TASK).call("pay", {"order": "o-1"})
    assert str(db) in str(caught.value)
    store.close()


def test_a_corrupt_file_fails_closed_and_is_kept(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    db.write_bytes(b"not a database, but someone's notes\n" * 200)
    before = db.read_bytes()
    _refused(db, r"file is not a database.*never replaced by a fresh state.*refused unless "
                 r"the policy says store.on_error = fail_open")
    assert db.read_bytes() == before


def test_a_damaged_store_fails_closed(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStore(db)
    for i in range(200):
        store.finish(TASK, FinishRequest("pay", f"s{i}", f"k{i}", True, True, False, True,
                                         f"d{i}", True, "x" * 500, False, 3600.0, 0.0))
    store.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    data = bytearray(db.read_bytes())
    data[4096 * 2:4096 * 6] = os.urandom(4096 * 4)  # pages of the tables' b-trees
    db.write_bytes(bytes(data))
    _refused(db, r"SQLite store .* failed")


def test_a_file_made_before_claims_had_an_end_gains_the_column(tmp_path: Path) -> None:
    """A store file whose records table has no ``claim_until`` column (made by an earlier
    version of the same schema) is upgraded in place: its claims lapse at their TTL as they
    did, and new claims turn into unknown outcomes."""
    path, clock = tmp_path / "state.db", FakeClock(1000.0)
    made = SQLiteStore(path, clock=clock)
    made.usage("t")  # the file and its tables
    made.close()
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("ALTER TABLE records DROP COLUMN claim_until")
        conn.execute("INSERT INTO records VALUES ('t', 'old', 'in_progress', 0, 1000.0, "
                     "1010.0, 'c#1', NULL)")
        conn.commit()
    store = SQLiteStore(path, clock=clock)
    try:
        def claim(key: str) -> Any:
            return store.begin("t", BeginRequest("pay", key, key, True, False, True, False,
                                                 clock(), 10.0, "c#2", 60.0))

        assert claim("new").claimed
        clock.advance(10.0)
        assert claim("old").claimed  # the old claim lapsed
        record = store.get_record("t", "new", clock())
        assert record is not None and record.state.value == "unknown"
    finally:
        store.close()


def test_a_foreign_database_is_not_taken_over(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.close()
    _refused(db, r"not a toolguard store .*other tables")
    with sqlite3.connect(db) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_schema")] == ["invoices"]
    conn.close()


@contextlib.contextmanager
def _locked(db: Path) -> Iterator[None]:
    """Another process's exclusive lock on the store's file (made first) while inside."""
    SQLiteStore(db).new_turn(TASK)
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_lock_held_past_the_busy_timeout_fails_closed(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with _locked(db):
        start = time.monotonic()
        _refused(db, r"locked by another process for more than the busy timeout \(0.2 s\)",
                 timeout_s=0.2)
        assert time.monotonic() - start < 5.0


def test_a_lock_held_past_the_busy_timeout_fails_open_when_asked(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with _locked(db):
        store = SQLiteStore(db, timeout_s=0.1, on_error="fail_open")
        guard = tg.Guard(tools=[pay], store=store)
        with capture_audit(guard) as events:
            assert guard.task(TASK).call("pay", {"order": "o-1"}).value == "paid o-1"
        assert any("fail_open" in e.reason and str(db) in e.reason for e in events)


def test_a_short_lock_is_waited_for(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    SQLiteStore(db).new_turn(TASK)
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN EXCLUSIVE")
    threading.Timer(0.3, lambda: holder.execute("COMMIT")).start()
    store = SQLiteStore(db, timeout_s=5.0)
    assert tg.Guard(tools=[pay], store=store).task(TASK).call(
        "pay", {"order": "o-1"}).decision is tg.Decision.ALLOW
    holder.close()


def test_a_finish_the_file_refuses_returns_the_result_and_holds_the_claim(tmp_path: Path
                                                                           ) -> None:
    """The tool ran, then the file stayed locked past the busy timeout: the result is
    returned with a warning; the outcome is not kept, so the claim holds identical calls
    (CallInProgress) until in_progress_ttl_s, never a second run meanwhile."""
    db = tmp_path / "state.db"
    holder = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    runs: list[str] = []

    @tg.mutating
    def charge(order: str) -> str:
        runs.append(order)
        holder.execute("BEGIN EXCLUSIVE")  # another process takes the file meanwhile
        return f"charged {order}"

    store = SQLiteStore(db, timeout_s=0.2)
    policy = tg.Policy(idempotency=IdempotencyPolicy(wait_timeout_s=0.3))
    guard = tg.Guard(policy, tools=[charge], store=store)
    with capture_audit(guard) as events:
        assert guard.task(TASK).call("charge", {"order": "o-1"}).value == "charged o-1"
    assert any("state not recorded" in e.reason and str(db) in e.reason for e in events)
    holder.execute("ROLLBACK")
    holder.close()
    with pytest.raises(tg.CallInProgress):
        guard.task(TASK).call("charge", {"order": "o-1"})
    assert runs == ["o-1"]
    store.close()


# -- bounds ------------------------------------------------------------------------------
def _record(store: SQLiteStore, clock: FakeClock, i: int, content: Any = "done",
            ttl_s: float = 3600.0) -> None:
    store.finish(TASK, FinishRequest("pay", f"s{i}", f"k{i}", True, True, False, True, f"d{i}",
                                     True, content, False, ttl_s, clock()))


def _rows(db: Path, table: str) -> int:
    with sqlite3.connect(db) as conn:
        (n,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    conn.close()
    return int(n)


def test_rows_are_bounded_least_recently_written_first(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStore(db, max_entries=3, clock=clock)
    for i in range(5):
        _record(store, clock, i)
    assert [store.get_record(TASK, f"k{i}", clock()) is not None for i in range(5)] == [
        False, False, True, True, True]
    for table in ("records", "sigs", "seen"):
        assert _rows(db, table) == 3, table
    # a signature counted again is used again: it outlives the ones written since
    begin = [BeginRequest("grep", f"g{i}", "", False, False, True, False, clock(), 30.0)
             for i in range(4)]
    for req in (begin[0], begin[1], begin[0], begin[2], begin[3]):
        store.begin(TASK, req)
    assert store.begin(TASK, begin[0]).count == 3  # g0 kept its count ...
    assert store.begin(TASK, begin[1]).count == 1  # ... g1, least recently used, went
    store.close()


class _Always:
    """Stands in for the store's random draw: every write sweeps."""

    def randrange(self, n: int) -> int:
        return 0


def test_a_sweep_removes_expired_records_and_idle_tasks(tmp_path: Path,
                                                        clock: FakeClock) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStore(db, state_ttl_s=100.0, max_tasks=2, clock=clock)
    _record(store, clock, 1, ttl_s=10.0)
    _record(store, clock, 2, ttl_s=1000.0)
    for task in ("a", "b"):
        store.new_turn(task)
    clock.advance(50.0)
    store._random = _Always()  # type: ignore[assignment]
    store.new_turn("c")  # three tasks: the least recently used one beyond max_tasks goes
    assert _rows(db, "records") == 1
    assert _rows(db, "tasks") == 2
    clock.advance(200.0)
    store.new_turn("d")  # every other task idle past state_ttl_s
    assert _rows(db, "tasks") == 1
    assert store.get_record(TASK, "k2", clock()) is not None  # records keep their own TTL
    store.close()


def test_bytes_are_bounded_oldest_records_first(tmp_path: Path, clock: FakeClock) -> None:
    db = tmp_path / "state.db"
    store = SQLiteStore(db, max_bytes=2 * 2**20, clock=clock)
    for i in range(40):
        _record(store, clock, i, content="x" * 200_000)  # 8 MB of results in all
    with sqlite3.connect(db) as conn:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    assert (pages - free) * size <= 2 * 2**20
    kept = [store.get_record(TASK, f"k{i}", clock()) is not None for i in range(40)]
    assert kept[-1] and not kept[0]
    assert kept == sorted(kept)  # the oldest went first
    assert db.stat().st_size < 4 * 2**20  # freed pages are used again: the file stays small
    store.close()


def test_threads_share_one_file(tmp_path: Path, clock: FakeClock) -> None:
    store = SQLiteStore(tmp_path / "state.db", clock=clock, timeout_s=LOCK_WAIT_S)
    req = BeginRequest("pay", "s", "k", True, False, True, False, clock(), 30.0)
    claims: list[bool] = []
    threads = [threading.Thread(target=lambda: claims.append(store.begin(TASK, req).claimed))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claims) == [False] * 7 + [True]
    assert store.usage(TASK).tool_calls == 8
    store.close()


def _open_on(path: Path) -> int:
    """How many of this process's descriptors are open on ``path`` (its WAL and index
    included)."""
    names = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):  # the directory's own descriptor is gone by now
            names.append(str(fd.readlink()))
    return sum(name.startswith(str(path)) for name in names)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_threads_that_come_and_go_leave_no_connection_behind(tmp_path: Path) -> None:
    """A long-lived process that runs each request in a new thread (the hook server) keeps
    a few connections, however many threads it ran (before: one per thread, never closed)."""
    db = tmp_path / "state.db"
    store = SQLiteStore(db)
    for i in range(40):
        thread = threading.Thread(target=store.new_turn, args=(f"task-{i}",))
        thread.start()
        thread.join()
    assert 0 < _open_on(db) <= 6  # a connection holds the file, its WAL and its index
    assert store.usage("task-39").epoch == 1
    store.close()
    assert _open_on(db) == 0


@pytest.mark.redis
def test_the_benchmark_runs(tmp_path: Path) -> None:
    # benchmarks/sqlite_store.py, wall clock only, one short round: every figure and ratio
    # is there (no timing asserted)
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "sqlite_store.json"
    done = subprocess.run(
        [sys.executable, str(root / "benchmarks" / "sqlite_store.py"), "--rounds", "1",
         "--batch-s", "0.001", "--no-callgrind", "--json", str(out)],
        cwd=root / "benchmarks", capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    report = json.loads(out.read_text(encoding="utf-8"))["wall_clock"]
    assert set(report["us_per_call"]) == {f"{s}/{p}" for s in ("memory", "sqlite", "redis")
                                          for p in ("allow", "executed")}
    assert all(report[f"sqlite/{other}/{path}"] > 0 for other in ("memory", "redis")
               for path in ("allow", "executed"))
