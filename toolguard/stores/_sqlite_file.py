"""The file under :class:`~toolguard.stores.SQLiteStore`: where it is (the per-user default,
``sqlite:`` URLs), opening it (mode 0600, WAL, our tables or an error, never a takeover),
the pool of its open connections, transactions, reading and writing a task's rows and its
records, the size bounds and the sweep, and what a failure tells the user.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import orjson

from toolguard._errors import StoreError
from toolguard._types import RecordState

from ._base import ApprovalRecord, IdempotencyRecord, RetryRequest
from ._json import _approval_json

__all__ = ["STATE_DIR_VARIABLE", "Pool", "default_path", "path_from_url"]

STATE_DIR_VARIABLE: Final = "TOOLGUARD_STATE_DIR"
_FILE_NAME: Final = "state.db"
_SCHEMA: Final = "1"  # the version of the tables below, kept in toolguard_meta
SWEEP_ONE_IN: Final = 64  # a write transaction sweeps with this chance (1 / n)
_SWEEP_TASKS: Final = 256  # idle tasks removed per sweep at most
_STATES: Final = {state.value: state for state in RecordState}
_IN_PROGRESS: Final = RecordState.IN_PROGRESS.value
PUT_RECORD: Final = (  # by column name: a file made before claim_until has it last
    "INSERT OR REPLACE INTO records (task, key, state, changes, created_at, expires_at, "
    "call_id, content, claim_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)")

_TABLES: Final = """
CREATE TABLE toolguard_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE tasks (
    task TEXT PRIMARY KEY, used_at REAL NOT NULL, epoch INTEGER NOT NULL,
    changes INTEGER NOT NULL, calls INTEGER NOT NULL, tokens_in INTEGER NOT NULL,
    tokens_out INTEGER NOT NULL, started_at REAL, halted BLOB, last_sig TEXT NOT NULL);
CREATE INDEX tasks_used_at ON tasks (used_at);
CREATE TABLE tools (
    task TEXT NOT NULL, tool TEXT NOT NULL, calls INTEGER NOT NULL, failures INTEGER NOT NULL,
    run_epoch INTEGER NOT NULL, run_len INTEGER NOT NULL, run_outcome TEXT NOT NULL,
    run_sig TEXT NOT NULL, PRIMARY KEY (task, tool)) WITHOUT ROWID;
CREATE TABLE sigs (
    task TEXT NOT NULL, sig TEXT NOT NULL, epoch INTEGER NOT NULL, count INTEGER NOT NULL,
    polls INTEGER NOT NULL, resets INTEGER NOT NULL, digest TEXT NOT NULL,
    transient INTEGER NOT NULL, UNIQUE (task, sig));
CREATE TABLE seen (task TEXT NOT NULL, sig TEXT NOT NULL, digest TEXT NOT NULL,
    UNIQUE (task, sig, digest));
CREATE TABLE records (
    task TEXT NOT NULL, key TEXT NOT NULL, state TEXT NOT NULL, changes INTEGER NOT NULL,
    created_at REAL NOT NULL, expires_at REAL NOT NULL, call_id TEXT NOT NULL, content BLOB,
    claim_until REAL, UNIQUE (task, key));
CREATE INDEX records_expires_at ON records (expires_at);
CREATE TABLE approvals (task TEXT NOT NULL, key TEXT NOT NULL, record BLOB NOT NULL,
    UNIQUE (task, key));
"""
# the cost of a task's model usage in nano-dollars (tool "": the task's, with its unpriced
# tokens); created in a file of the same schema made before the table was
_COSTS: Final = """
CREATE TABLE IF NOT EXISTS costs (task TEXT NOT NULL, tool TEXT NOT NULL,
    nusd INTEGER NOT NULL, unpriced INTEGER NOT NULL, PRIMARY KEY (task, tool))
    WITHOUT ROWID
"""
_TASK_TABLES: Final = ("tasks", "tools", "sigs", "seen", "approvals", "costs")
"""Tables of per-task state (records keep their own TTLs)."""


def default_path(env: Mapping[str, str] | None = None) -> Path:
    """The per-user state file for processes of one machine (hook commands, ``toolguard
    approve``, ``toolguard resume``): ``$TOOLGUARD_STATE_DIR/state.db`` if that variable is
    set, else ``$XDG_STATE_HOME/toolguard/state.db`` (an absolute ``XDG_STATE_HOME`` only, as
    the XDG Base Directory Specification says), else ``~/.local/state/toolguard/state.db``;
    ``~`` is the ``HOME`` of ``env``.

    Args:
        env: the environment variables; None reads ``os.environ``.

    Returns:
        The path (not created here: :class:`~toolguard.stores.SQLiteStore` creates it, and
        each missing directory with mode 0700, on first use).
    """
    environ = os.environ if env is None else env
    home = environ.get("HOME", "")
    given = environ.get(STATE_DIR_VARIABLE, "")
    if given:
        return _expand_home(given, home) / _FILE_NAME
    xdg = environ.get("XDG_STATE_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "toolguard" / _FILE_NAME
    return (Path(home) if home else Path.home()) / ".local" / "state" / "toolguard" / _FILE_NAME


def _expand_home(path: str, home: str) -> Path:
    """``path`` with a leading ``~`` read as ``home`` (the ``HOME`` of the environment the
    path came with: the hook server answers for commands of other environments); with no
    ``home``, or for ``~user``, as :meth:`pathlib.Path.expanduser` reads it."""
    if home and (path == "~" or path.startswith("~/")):
        return Path(home + path[1:])
    return Path(path).expanduser()


def path_from_url(url: str) -> Path:
    """The file of a ``sqlite:`` URL, as SQLAlchemy spells them: ``sqlite:///state.db``
    (relative to the working directory), ``sqlite:////var/lib/toolguard/state.db``
    (absolute), ``sqlite:///~/state.db`` (in the home directory); ``sqlite://`` alone is
    :func:`default_path`.

    Raises:
        ValueError: not a ``sqlite:`` URL, a host (``sqlite://host/x``), a query, or an
            in-memory database (``:memory:``: one per connection, so no state would be
            shared; use the memory store).
    """
    parts = urlsplit(url)
    if parts.scheme != "sqlite":
        raise ValueError(f"not a sqlite: URL: {url!r}")
    if parts.netloc or parts.query or parts.fragment:
        raise ValueError(f"a sqlite: URL is sqlite:///PATH (no host, query or fragment), "
                         f"got {url!r}")
    path = unquote(parts.path)
    if not path:
        return default_path()
    path = path[1:]  # the slash after the empty host
    if not path:
        raise ValueError(f"a sqlite: URL needs a file after sqlite:///, got {url!r}")
    if path == ":memory:" or path.startswith("file:"):
        raise ValueError(f"{url!r} is not a file: an in-memory database is private to one "
                         "connection (use the memory store)")
    return Path(path).expanduser()


def open_database(path: Path, timeout_s: float) -> sqlite3.Connection:
    """A connection to ``path`` in autocommit mode (transactions are explicit), WAL, with a
    busy timeout of ``timeout_s``; the file (mode 0600) and its directories (0700) are made
    if missing, the tables in an empty file.

    Raises:
        sqlite3.Error: the file is not a database, corrupt, or holds other tables.
        OSError: the file or a directory cannot be made.
    """
    if not path.exists():
        # every directory made here 0700, as the XDG spec asks of the state directory
        for parent in reversed([*path.parents]):
            if not parent.exists():
                parent.mkdir(mode=0o700, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another process made it meanwhile
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    conn = sqlite3.connect(path, timeout=timeout_s, isolation_level=None,
                           check_same_thread=False)
    try:
        _wal(conn, timeout_s)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA journal_size_limit = 4194304")  # WAL truncated to 4 MB
        with transaction(conn):
            _check_schema(conn)
    except BaseException:
        conn.close()
        raise
    return conn


class Pool:
    """The open connections to one file, each lent to one operation at a time and then
    kept for the next, so that a long-lived process whose threads come and go (the hook
    server answers each event in a thread of its own) holds a few descriptors, not one
    connection per thread it ever ran.

    Args:
        path: the database file. timeout_s: the busy timeout of each connection.
        keep: idle connections kept at most; one more lent at once is closed when it
            comes back.

    Thread-safe. A forked child opens its own connections: SQLite's must not be used
    across a fork, so the parent's are neither used nor closed in the child.
    """

    def __init__(self, path: Path, timeout_s: float, keep: int = 4) -> None:
        self.path = path
        self._timeout_s = timeout_s
        self._keep = keep
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._pid = os.getpid()
        self._inherited: list[sqlite3.Connection] = []  # the parent's, left alone

    @contextlib.contextmanager
    def lend(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation (opened, and the tables checked, when none is
        idle), taken back afterwards; one whose operation raised is closed instead.

        Raises:
            sqlite3.Error, OSError: as :func:`open_database`.
        """
        with self._lock:
            if self._pid != os.getpid():
                self._inherited += self._idle
                self._idle, self._pid = [], os.getpid()
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = open_database(self.path, self._timeout_s)
        try:
            yield conn
        except BaseException:
            _close(conn)
            raise
        with self._lock:
            if self._pid == os.getpid() and len(self._idle) < self._keep:
                self._idle.append(conn)
                return
        _close(conn)

    def close(self) -> None:
        """Close the idle connections (one lent now is closed when it comes back only if
        the pool is full; a later operation opens a new one)."""
        with self._lock:
            conns, self._idle = (self._idle, []) if self._pid == os.getpid() else ([], [])
        for conn in conns:
            _close(conn)


def _close(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.close()


def _wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file in WAL mode. Several processes opening a new file at once race for the
    change of journal mode, and SQLite answers the losers "database is locked" at once,
    without its busy handler: they try again until ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.005)
        else:
            return


def _check_schema(conn: sqlite3.Connection) -> None:
    """Create the tables in an empty file; in any other file, require ours."""
    names = {row[0] for row in conn.execute(
        "SELECT name FROM sqlite_schema WHERE type = 'table'")}
    if not names:
        for statement in _TABLES.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO toolguard_meta VALUES ('schema', ?)", (_SCHEMA,))
        conn.execute(_COSTS)
        return
    version = None
    if "toolguard_meta" in names:
        row = conn.execute("SELECT value FROM toolguard_meta WHERE name = 'schema'").fetchone()
        version = row and row[0]
    if version != _SCHEMA:
        raise sqlite3.DatabaseError(
            "the file is a SQLite database but not a toolguard store of schema "
            f"{_SCHEMA} (found {'schema ' + str(version) if version else 'other tables'})")
    if "costs" not in names:
        conn.execute(_COSTS)
    if "claim_until" not in {row[1] for row in conn.execute("PRAGMA table_info(records)")}:
        # a file of the same schema made before claims had an end of their own: its
        # claims (NULL) lapse at expires_at as they did
        conn.execute("ALTER TABLE records ADD COLUMN claim_until REAL")


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE`` (the write lock, taken before anything is read) ... ``COMMIT``,
    rolled back if the body raises."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def failure(path: Path, timeout_s: float, on_error: str | None, op: str, task_id: str,
            exc: BaseException) -> StoreError:
    """The error a failed operation raises: the file, what went wrong, what the guard does."""
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        why = (f"the file stayed locked by another process for more than the busy "
               f"timeout ({timeout_s:g} s)")
    elif isinstance(exc, sqlite3.DatabaseError) and not isinstance(
            exc, sqlite3.OperationalError):
        why = (f"{text}; the file is kept as it is (never replaced by a fresh state): "
               "move it away to start over, losing the state it held")
    else:
        why = f"{type(exc).__name__}: {text}"
    if on_error == "fail_open":
        then = "the call runs unguarded (store.on_error = fail_open)"
    elif on_error == "fail_closed":
        then = "the call is refused (store.on_error = fail_closed)"
    else:
        then = "the call is refused unless the policy says store.on_error = fail_open"
    return StoreError(f"SQLite store {path} failed ({op}, task {task_id!r}): {why}; {then}")


def drop_task(conn: sqlite3.Connection, task_id: str) -> None:
    """Forget the task's state (not its idempotency records, which keep their TTLs)."""
    for table in _TASK_TABLES:
        conn.execute(f"DELETE FROM {table} WHERE task = ?", (task_id,))  # noqa: S608


def bound(conn: sqlite3.Connection, table: str, max_rows: int) -> None:
    """Right after an insert into ``table`` added a row: keep its ``max_rows`` most recently
    written rows (rowids grow with every write, and ``INSERT OR REPLACE`` gives the row a new
    one). Every row left has a rowid within ``max_rows`` of the newest, so at most
    ``max_rows`` remain; a rewrite, which adds no row, need not call this."""
    conn.execute(f"DELETE FROM {table} WHERE rowid <= last_insert_rowid() - ?",  # noqa: S608
                 (max_rows,))


def add_seen(conn: sqlite3.Connection, task_id: str, signature: str, digest: str,
             max_rows: int) -> bool:
    """Add (signature, digest) to the task's seen pairs (keeping ``max_rows``); False if it
    was there already."""
    if not conn.execute("INSERT OR IGNORE INTO seen VALUES (?, ?, ?)",
                        (task_id, signature, digest)).rowcount:
        return False
    bound(conn, "seen", max_rows)
    return True


def fit(conn: sqlite3.Connection, max_bytes: int) -> None:
    """Past ``max_bytes`` of pages in use, drop the oldest records (never the newest)."""
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    while True:
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
        (free,) = conn.execute("PRAGMA freelist_count").fetchone()
        if (pages - free) * size <= max_bytes:
            return
        (rows,) = conn.execute("SELECT count(*) FROM records").fetchone()
        if rows <= 1:
            return
        conn.execute("DELETE FROM records WHERE rowid IN (SELECT rowid FROM records "
                     "ORDER BY rowid LIMIT ?)", (max(1, (rows - 1) // 4),))


def sweep(conn: sqlite3.Connection, now: float, state_ttl_s: float, max_tasks: int) -> None:
    """Delete expired records, tasks idle past ``state_ttl_s`` and the least recently used
    tasks beyond ``max_tasks`` (at most ``_SWEEP_TASKS`` tasks at a time)."""
    conn.execute("DELETE FROM records WHERE expires_at <= ?", (now,))
    idle = [row[0] for row in conn.execute(
        "SELECT task FROM tasks WHERE used_at < ? LIMIT ?", (now - state_ttl_s, _SWEEP_TASKS))]
    (count,) = conn.execute("SELECT count(*) FROM tasks").fetchone()
    over = min(count - len(idle) - max_tasks, _SWEEP_TASKS)
    if over > 0:
        idle += [row[0] for row in conn.execute(
            "SELECT task FROM tasks WHERE used_at >= ? ORDER BY used_at LIMIT ?",
            (now - state_ttl_s, over))]
    for task_id in idle:
        drop_task(conn, task_id)


def load_task(conn: sqlite3.Connection, task_id: str, now: float, state_ttl_s: float
              ) -> list[Any]:
    """The task's row as a list (a fresh one if it was idle past ``state_ttl_s``), its
    ``used_at`` already set to ``now``; write it back with :func:`put_task`."""
    row = conn.execute(
        "SELECT used_at, epoch, changes, calls, tokens_in, tokens_out, started_at, "
        "halted, last_sig FROM tasks WHERE task = ?", (task_id,)).fetchone()
    if row is not None and now - row[0] <= state_ttl_s:
        state = list(row)
        state[0] = now
        return state
    if row is not None:
        drop_task(conn, task_id)
    return [now, 0, 0, 0, 0, 0, None, None, ""]


def put_task(conn: sqlite3.Connection, task_id: str, state: list[Any]) -> None:
    conn.execute("INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (task_id, *state))


def load_tool(conn: sqlite3.Connection, task_id: str, tool: str) -> list[Any]:
    """The (task, tool) row as a list: calls, failures, and the stagnation run (epoch,
    length, outcome, signatures); zeros for a tool the task never called."""
    row = conn.execute(
        "SELECT calls, failures, run_epoch, run_len, run_outcome, run_sig FROM tools "
        "WHERE task = ? AND tool = ?", (task_id, tool)).fetchone()
    return list(row) if row else [0, 0, -1, 0, "", ""]


def put_tool(conn: sqlite3.Connection, task_id: str, tool: str, tool_state: list[Any]) -> None:
    conn.execute("INSERT OR REPLACE INTO tools VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                 (task_id, tool, *tool_state))


def load_record(conn: sqlite3.Connection, task_id: str, key: str, now: float
                ) -> IdempotencyRecord | None:
    """The idempotency record under ``key`` unless it expired by ``now``; a claim whose TTL
    ended (``claim_until``) by ``now`` reads as an unknown outcome (it may have happened)."""
    row = conn.execute(
        "SELECT state, changes, created_at, call_id, content, claim_until FROM records "
        "WHERE task = ? AND key = ? AND expires_at > ?", (task_id, key, now)).fetchone()
    if row is None:
        return None
    state, changes, created_at, call_id, content, claim_until = row
    if state == _IN_PROGRESS and claim_until is not None and claim_until <= now:
        return IdempotencyRecord(RecordState.UNKNOWN, changes, claim_until, None, call_id)
    return IdempotencyRecord(_STATES[state], changes, created_at,
                             None if content is None else orjson.loads(content), call_id)


def put_approval(conn: sqlite3.Connection, task_id: str, key: str, record: ApprovalRecord,
                 max_rows: int) -> None:
    conn.execute("INSERT OR REPLACE INTO approvals VALUES (?, ?, ?)",
                 (task_id, key, _approval_json(record)))
    bound(conn, "approvals", max_rows)


def retry_unknown(conn: sqlite3.Connection, task_id: str, req: RetryRequest, now: float,
                  max_rows: int) -> bool:
    """``SQLiteStore.retry_unknown``, in the caller's transaction: the unknown outcome of
    ``req.origin``'s call becomes the retry's claim, kept as begin keeps one (an unknown
    outcome for ``req.ttl_s`` once ``req.claim_ttl_s`` passes), and its approval is spent;
    False, nothing changed, when the record is anything else."""
    key = req.idempotency_key
    record = load_record(conn, task_id, key, now)
    if record is None or record.state is not RecordState.UNKNOWN or record.call_id != req.origin:
        return False  # claimed by another retry, finished, or expired meanwhile
    conn.execute(PUT_RECORD, (task_id, key, _IN_PROGRESS, record.epoch, req.now,
                              now + req.claim_ttl_s + req.ttl_s, req.call_id, None,
                              now + req.claim_ttl_s))
    bound(conn, "records", max_rows)
    put_approval(conn, task_id, key, req.approval, max_rows)
    return True
