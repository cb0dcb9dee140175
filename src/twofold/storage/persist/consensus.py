"""Consensus on PostgreSQL: versioned shard states advanced only by compare-and-set.

Tables (in one schema, `twofold` unless the URL says `schema=`):

- `shards(shard, desc)` — each shard's schema, written once when it is created;
- `consensus(shard, seqno, upper, data_seqno, token, data, created)` — version `seqno` of a
  shard's state. `upper` is the version's write frontier (times stored as `t - 2**63`, the empty
  frontier as NULL); `data` (the parts, since and readers) is present on the versions that
  changed it and `data_seqno` names the version holding the current one, so advancing only the
  upper writes a few bytes. `token` is the writer's idempotency token;
- `parts(shard, key, data)` — the bytes of small (inlined) parts, each row inserted by the
  same statement as the version that first references it, so it exists exactly when that
  version does and the state itself carries only part metadata;
- `oracle(name, ts)` — the timestamp oracle.

The CAS is the one measured fastest here that also keeps writers of different shards from
conflicting: under READ COMMITTED, lock the expected head row `FOR KEY SHARE` and insert version
`n + 1` in the same statement; zero rows (the expected head is gone) or a primary-key violation
(someone inserted `n + 1` first) is a mismatch.

The CAS is a server-side prepared statement executed through libpq directly (psycopg's
`pgconn` with binary parameters, waited for without blocking other threads): it is the hot path
of every small append, and psycopg's cursor layer (query conversion, adaptation, result
wrapping) cost more client CPU than the statement's round trip; each connection prepares it
once.

A CAS whose connection fails mid-statement is *indeterminate*: it may have committed. The caller
reconnects (retrying until `retry_timeout`) and reads version `n + 1`: present with its own
token, it had committed; present with another token, it lost; absent, nothing happened and the
CAS is retried with the same token. A later mismatch is also checked against the token, so a
first attempt that commits while the retry is in flight is never reported as lost. A version is
truncated only when it is old by count and by age, so the check always finds `n + 1`; if it
cannot, the call fails rather than guess.

After a version lands, if its state holds a leased reader (every listener, in any process,
holds one from before it first reads: see `leases.py`), the writer `NOTIFY`s the schema's
channel with the shard id in a transaction of its own, from a background thread
(`NotifySender`, which batches the shards of appends landing while it sends), so listeners in
every process wake when a shard changes (`NotifyThread`) and the append does not wait for it.
Not in the same transaction (as an insert trigger would): PostgreSQL serialises the commits of
notifying transactions on one cluster-wide lock held across their WAL flush, which would stop
concurrent compare-and-sets on different shards from sharing a flush (group commit). A
notifying transaction is not free either: it is given a transaction id and writes a commit
record (measured here: ~3 more WAL records per append, and ~40% fewer appends/s on one shard).
So a version whose state holds no leased reader sends no `NOTIFY`: nobody in another process
is waiting for it, and a listener that registers later reads the shard after registering (and
after subscribing to the channel), so it sees the version.
"""

from __future__ import annotations

import contextlib
import logging
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import psycopg
import psycopg.errors
from psycopg import generators, pq

from twofold.storage.errors import InvalidStorageUrl, StorageClosed, StorageError
from twofold.storage.persist.notify import ListeningNotifier, NotifySender, NotifyThread

__all__ = [  # the notification classes moved to notify.py; importable from here as before
    "CONNECTION_ERRORS", "FORMAT", "Consensus", "Indeterminate", "ListeningNotifier",
    "NotifySender", "NotifyThread", "Statement", "Unreachable",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,40}")

_DDL: Final = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.meta (key text PRIMARY KEY, value text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.shards (shard text PRIMARY KEY, "desc" bytea NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.consensus (
    shard text NOT NULL, seqno bigint NOT NULL, upper bigint, data_seqno bigint NOT NULL,
    token uuid, data bytea, created timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard, seqno)
);
CREATE TABLE IF NOT EXISTS {s}.parts (
    shard text NOT NULL, key text NOT NULL, data bytea NOT NULL, PRIMARY KEY (shard, key)
);
CREATE TABLE IF NOT EXISTS {s}.oracle (name text PRIMARY KEY, ts numeric(20) NOT NULL);
"""

FORMAT: Final = "twofold-persist-2"

CONNECTION_ERRORS: Final = (psycopg.OperationalError, psycopg.InterfaceError)

_INT8: Final = struct.Struct(">q")
_TEXT, _BIGINT, _UUID, _BYTEA = 25, 20, 2950, 17
_CAS_HEAD: Final = ("WITH head AS (SELECT 1 FROM {s}.consensus WHERE shard = $1 AND seqno = $2 "
                    "FOR KEY SHARE)")
_CAS_INSERT: Final = ("INSERT INTO {s}.consensus (shard, seqno, upper, data_seqno, token, data) "
                      "SELECT $1, $2 + 1, $3, $4, $5, $6 FROM head")
Statement = tuple[bytes, str, tuple[int, ...]]
"""A prepared statement: its name, its SQL (`{s}` for the schema), its parameter types."""
_CAS: Final[Statement] = (
    b"twofold_cas", _CAS_HEAD + " " + _CAS_INSERT,
    (_TEXT, _BIGINT, _BIGINT, _BIGINT, _UUID, _BYTEA))
_CAS_INLINE: Final[Statement] = (  # one statement: the part's row exists iff the version does
    b"twofold_cas_inline",
    _CAS_HEAD + ", version AS (" + _CAS_INSERT + " RETURNING 1) "
    "INSERT INTO {s}.parts (shard, key, data) SELECT $1, $7, $8 FROM version",
    (_TEXT, _BIGINT, _BIGINT, _BIGINT, _UUID, _BYTEA, _TEXT, _BYTEA))
_CAS_FORMATS: Final[tuple[int, ...]] = (0, 1, 1, 1, 1, 1)
_CAS_INLINE_FORMATS: Final[tuple[int, ...]] = (0, 1, 1, 1, 1, 1, 0, 1)


def _int8(value: int | None) -> bytes | None:
    return None if value is None else _INT8.pack(value)


class Unreachable(StorageError):
    """No connection to the consensus database could be made."""


class Indeterminate(StorageError):
    """A compare-and-set whose outcome could not be established (the server stayed away, or
    the version that would tell was truncated)."""


class Consensus:
    """Connections (one per thread) to the consensus database, and its statements."""

    def __init__(self, conninfo: str, schema: str, *, retry_timeout: float = 60.0) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise InvalidStorageUrl(
                f"schema {schema!r}: use lower-case letters, digits and '_' (at most 41)"
            )
        self.conninfo = conninfo
        self.schema = schema
        self.channel = f"twofold_{schema}"
        self.retry_timeout = retry_timeout
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[psycopg.Connection[Any]] = []
        self._closed = False
        self.fault: Callable[[str], None] | None = None  # test hook: called at named points
        self.sender = NotifySender(self)
        self._initialise()

    # -- connections ------------------------------------------------------------------------

    def connect(self) -> psycopg.Connection[Any]:
        with self._lock:
            if self._closed:
                raise StorageClosed("this PostgreSQL storage handle is closed")
        try:
            conn = psycopg.connect(self.conninfo, autocommit=True, connect_timeout=10)
        except psycopg.Error as e:
            raise Unreachable(f"cannot connect to PostgreSQL ({self.where}): {e}") from None
        with self._lock:
            self._connections.append(conn)
        return conn

    @property
    def where(self) -> str:
        info = psycopg.conninfo.conninfo_to_dict(self.conninfo)
        return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self.connect()
            self._local.conn = conn
            self._local.prepared = set()
        return conn

    def _exec_prepared(self, statement: Statement,
                       params: list[bytes | None], formats: tuple[int, ...]) -> int:
        """Run the prepared `statement` (name, SQL with `{s}` for the schema, parameter type
        oids) on this thread's connection, preparing it first if this connection has not;
        returns the rows it affected. Raises psycopg's errors, as a cursor would."""
        conn = self._conn()
        pgconn = conn.pgconn
        name, sql, types = statement
        prepared: set[bytes] = self._local.prepared
        if name not in prepared:
            pgconn.send_prepare(name, sql.format(s=self.schema).encode(), param_types=types)
            self._check(conn.wait(generators.execute(pgconn)))
            prepared.add(name)
        pgconn.send_query_prepared(name, params, param_formats=formats)
        return self._check(conn.wait(generators.execute(pgconn)))

    @staticmethod
    def _check(results: list[pq.abc.PGresult]) -> int:
        if not results:
            raise psycopg.InterfaceError("no result from the server")
        for result in results:
            if result.status == pq.ExecStatus.FATAL_ERROR:
                raise psycopg.errors.error_from_result(result)
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise psycopg.InterfaceError(
                    f"unexpected result {pq.ExecStatus(result.status).name}")
        return results[-1].command_tuples or 0

    def _drop(self) -> None:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        self._local.conn = None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
            with self._lock:
                if conn in self._connections:
                    self._connections.remove(conn)

    def run(self, what: str, fn: Callable[[psycopg.Cursor[Any]], T], *,
            retry: bool = True) -> T:
        """Run an idempotent `fn` on this thread's connection, reconnecting and retrying it
        while the server is unreachable (up to `retry_timeout` seconds, unless not `retry`)."""
        deadline = time.monotonic() + (self.retry_timeout if retry else 0.0)
        delay = 0.05
        while True:
            try:
                with self._conn().cursor() as cur:
                    return fn(cur)
            except Unreachable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except CONNECTION_ERRORS as e:
                self._check_open()
                self._drop()
                if time.monotonic() > deadline:
                    raise StorageError(f"PostgreSQL ({self.where}): {what} failed: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
            except psycopg.Error as e:
                raise StorageError(f"PostgreSQL ({self.where}): {what} failed: {e}") from None

    def _check_open(self) -> None:
        if self._closed:
            raise StorageClosed("this PostgreSQL storage handle is closed")

    @contextlib.contextmanager
    def transaction(self, what: str) -> Iterator[psycopg.Cursor[Any]]:
        """One transaction on this thread's connection (not retried)."""
        conn = self._conn()
        try:
            with conn.transaction(), conn.cursor() as cur:
                yield cur
        except CONNECTION_ERRORS as e:
            self._drop()
            raise StorageError(f"PostgreSQL ({self.where}): {what} failed: {e}") from None
        except psycopg.Error as e:
            raise StorageError(f"PostgreSQL ({self.where}): {what} failed: {e}") from None

    def _initialise(self) -> None:
        def init(cur: psycopg.Cursor[Any]) -> str | None:
            with cur.connection.transaction():
                # Serialise concurrent first opens: CREATE ... IF NOT EXISTS races otherwise.
                cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.channel,))
                cur.execute("SELECT to_regclass(%s)", (f"{self.schema}.meta",))
                row = cur.fetchone()
                if row is None or row[0] is None:
                    cur.execute(_DDL.format(s=self.schema).encode())
                    cur.execute(f"INSERT INTO {self.schema}.meta VALUES ('format', %s)",
                                (FORMAT,))
                cur.execute(f"SELECT value FROM {self.schema}.meta WHERE key = 'format'")
                found = cur.fetchone()
                return None if found is None else str(found[0])

        fmt = self.run("opening", init, retry=False)
        if fmt != FORMAT:
            raise StorageError(
                f"PostgreSQL ({self.where}) schema {self.schema!r} holds format {fmt!r}, "
                f"this code reads {FORMAT!r}"
            )

    def close(self) -> None:
        self.sender.stop()  # sends what is pending first
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            with contextlib.suppress(Exception):
                conn.close()

    # -- compare-and-set --------------------------------------------------------------------

    def notify(self, shards: list[str]) -> None:
        """Wake the listeners of `shards` in every process (best effort: a lost notification
        is caught by the listeners' safety-net poll)."""
        if not shards:
            return
        sql = f"SELECT pg_notify('{self.channel}', s) FROM unnest(%s::text[]) s"
        try:
            with self._conn().cursor() as cur:
                cur.execute(sql, (shards,))
        except CONNECTION_ERRORS:
            self._drop()
        except (psycopg.Error, StorageError):
            pass

    def cas(self, shard: str, expected: int, upper: int | None, data: bytes | None,
            data_seqno: int, token: bytes,
            inline: tuple[str, bytes] | None = None, *, notify: bool = True) -> bool:
        """Insert version `expected + 1` iff `expected` is the head, and with it the row
        `inline = (key, bytes)` of `parts` if given; then (if `notify`) wake other processes'
        listeners. See the module docstring for how a lost connection is resolved."""
        shard_bytes = shard.encode()
        params: list[bytes | None] = [shard_bytes, _INT8.pack(expected), _int8(upper),
                                      _INT8.pack(data_seqno), token, data]
        if inline is None:
            statement, formats = _CAS, _CAS_FORMATS
        else:
            statement, formats = _CAS_INLINE, _CAS_INLINE_FORMATS
            params += [inline[0].encode(), inline[1]]
        deadline = time.monotonic() + self.retry_timeout
        uncertain = False
        delay = 0.05
        while True:
            try:
                if self.fault is not None:
                    self.fault("before_cas")
                won = self._exec_prepared(statement, params, formats) == 1
                if self.fault is not None:
                    self.fault("after_cas")
            except psycopg.errors.UniqueViolation:
                won = False
            except (*CONNECTION_ERRORS, Unreachable) as e:
                self._check_open()
                self._drop()
                uncertain = True
                if time.monotonic() > deadline:
                    raise Indeterminate(
                        f"PostgreSQL ({self.where}): compare-and-set of shard {shard!r} version "
                        f"{expected + 1}: outcome unknown, the server stayed unreachable: {e}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                outcome = self._resolve(shard, expected, token)
                if outcome is not None:
                    if outcome and notify:
                        self.sender.send(shard)
                    return outcome
                continue  # nothing landed: try again with the same token
            except psycopg.Error as e:
                raise StorageError(
                    f"PostgreSQL ({self.where}): compare-and-set of shard {shard!r}: {e}"
                ) from None
            if not won and uncertain:
                # A mismatch after an uncertain attempt may be that attempt having landed.
                won = bool(self._resolve(shard, expected, token))
            if won and notify:
                self.sender.send(shard)
            return won

    def _resolve(self, shard: str, expected: int, token: bytes) -> bool | None:
        """After an uncertain CAS: `True` if version `expected + 1` is ours, `False` if another
        writer's, `None` if it does not exist yet."""

        def look(cur: psycopg.Cursor[Any]) -> tuple[Any, ...]:
            cur.execute(
                f"SELECT (SELECT token FROM {self.schema}.consensus WHERE shard = %(s)s "
                f"AND seqno = %(n)s), (SELECT min(seqno) FROM {self.schema}.consensus "
                f"WHERE shard = %(s)s)", {"s": shard, "n": expected + 1})
            row = cur.fetchone()
            assert row is not None
            return tuple(row)

        found, oldest = self.run(f"checking an uncertain append to {shard!r}", look)
        if found is not None:
            return bool(found.bytes == token)
        if oldest is not None and oldest > expected + 1:
            raise Indeterminate(
                f"shard {shard!r}: cannot tell whether version {expected + 1} was this "
                f"writer's: it was already truncated"
            )
        return None

