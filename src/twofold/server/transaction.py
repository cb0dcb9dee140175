"""One session's transaction as a sans-IO state machine: what each statement may do.

The rules are Materialize's (`docs/pgwire.md`, "Transactions"):

- Outside `BEGIN` every statement is its own transaction (autocommit): `Action.RUN`.
- Inside `BEGIN` the first statement that reads or writes data decides the *access*:
  - **read**: the first read chooses the timestamp (`Action.READ_CHOOSE`, then `pin(ts)`);
    every later read runs at it (`Action.READ_AT`), so repeated reads see the same data
    while writes land. A read with its own `AS OF` is exempt (`Action.RUN`). A write is
    `25006` "transaction in read-only mode"; so is any write after `BEGIN READ ONLY`.
  - **write**: `INSERT`, `UPDATE`, `DELETE` and `COPY FROM` are staged (`Action.STAGE`) and
    applied at `COMMIT` in one atomic write of one table, or discarded by `ROLLBACK`. A read
    of data is `25000` "transaction in write-only mode"; a write to a second table is `25000`
    "write transactions only support writes to a single table".
  - **subscribe**: a `SUBSCRIBE` (or a cursor over one) must be the only read: any other
    read is `25000`, a write `25006`.
- Statements that read no data — constant queries, catalog relations, `SET`/`SHOW`, cursor
  `FETCH`/`CLOSE` — run in every access mode (`Action.RUN`); so does DDL, which is not
  transactional (it takes effect at once).
- An error inside `BEGIN` fails the transaction (`E`): every statement but `COMMIT`,
  `ROLLBACK` and `ROLLBACK TO SAVEPOINT` is `25P02` until then; `COMMIT` then reports
  `ROLLBACK` and discards the staged writes. `SAVEPOINT` marks the staged writes;
  `ROLLBACK TO` drops those staged after the mark and clears a failure; `RELEASE` forgets it.
- The implicit transaction, as PostgreSQL's: outside `BEGIN`, the first write between two
  Syncs (extended protocol) or with more statements after it in one Query message (simple
  protocol) opens one (`begin_implicit`; reads before it ran on their own, as autocommit) and
  the statements until Sync or the Query's end follow the rules above — later writes are
  staged with it, a read of data after it is `25000`; an error skips the rest and discards
  them all; the end applies them in one atomic write (`end_implicit`). `BEGIN` inside it
  makes it a block; `COMMIT`/`ROLLBACK` end it (with PostgreSQL's `25P01` warning, as outside
  any transaction); `SAVEPOINT`, `RELEASE` and `ROLLBACK TO` are `25P01` outside a block.
  ReadyForQuery reports `I` throughout.
- `SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY` (what JDBC's `setReadOnly` and
  SQLAlchemy's `postgresql_readonly` send) makes every later `BEGIN` read-only (`READ WRITE`
  undoes it); `SET TRANSACTION READ ONLY` makes the current one read-only; `SET TRANSACTION
  READ WRITE` after the transaction has read is `25001`, as in PostgreSQL.

`status` is what ReadyForQuery reports: `I` idle, `T` in a transaction block, `E` failed.
Every refusal is a `TransactionError` carrying its SQLSTATE; the machine does no IO.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any

from twofold.sql.errors import SqlError


class TransactionError(SqlError):
    """A statement the transaction's state refuses; `sqlstate` per instance."""

    def __init__(self, message: str, code: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.sqlstate = code  # type: ignore[misc]
        self.hint = hint  # PostgreSQL's HINT field, when there is one to give


class Kind(enum.Enum):
    """What a statement does, as far as the transaction is concerned."""

    READ = "read"          # reads data: pinned to the transaction's timestamp
    READ_AS_OF = "as of"   # reads data at its own AS OF: exempt from pinning
    WRITE = "write"        # INSERT/UPDATE/DELETE/COPY FROM one table
    SUBSCRIBE = "subscribe"
    FREE = "free"          # reads no data (constants, catalog relations, SET/SHOW, FETCH)
    DDL = "ddl"            # CREATE/DROP: runs at once, not transactional


class Action(enum.Enum):
    RUN = "run"                  # run now, on its own
    READ_CHOOSE = "read choose"  # run now; then `pin` the timestamp it read at
    READ_AT = "read at"          # run at `Transaction.timestamp`
    STAGE = "stage"              # compute the write now, `stage` it; apply at COMMIT


class Access(enum.Enum):
    NONE = "none"
    READ = "read"
    WRITE = "write"
    SUBSCRIBE = "subscribe"


@dataclass
class Staged:
    """One staged write of a table (`payload` is the IO side's: rows or a compiled write)."""

    table: str
    op: str  # "insert" | "update" | "delete"
    payload: Any
    reads: bool = False  # planned against the table's contents (UPDATE, DELETE)
    version: int | None = None  # the contents' version it was planned against, if it reads


@dataclass
class Commit:
    """What COMMIT does: its command tag and the writes to apply (all of one table); and the
    WARNING PostgreSQL sends with it, as (SQLSTATE, message), if any."""

    tag: str
    writes: list[Staged] = field(default_factory=list)
    warning: tuple[str, str] | None = None


_READ_ONLY = re.compile(r"\bread\s+only\b", re.I)
_READ_WRITE = re.compile(r"\bread\s+write\b", re.I)
_CHARACTERISTICS = re.compile(r"^\s*set\s+(session\s+characteristics\s+as\s+)?transaction\b",
                              re.I)
_SAVEPOINT = re.compile(r"^\s*(?:savepoint|release(?:\s+savepoint)?|rollback\s+(?:work\s+|"
                        r"transaction\s+)?to(?:\s+savepoint)?)\s+\"?(\w+)\"?", re.I)

READ_ONLY_MODE = "transaction in read-only mode"
WRITE_ONLY_MODE = "transaction in write-only mode"
ONE_TABLE = "write transactions only support writes to a single table"
SUBSCRIBE_ONLY = "SUBSCRIBE in transactions must be the only read statement"
ABORTED = "current transaction is aborted, commands ignored until end of transaction block"
READ_AFTER_WRITE_HINT = ("a read of data cannot follow a write in one transaction (a Query "
                         "message of several statements is one): it would not see the write; "
                         "send the read as its own query")
ONE_TABLE_HINT = "write each table in its own transaction (its own query)"
NO_TRANSACTION = ("25P01", "there is no transaction in progress")
ALREADY = ("25001", "there is already a transaction in progress")


class Transaction:
    """The transaction state of one session (see the module docstring)."""

    def __init__(self) -> None:
        self._reset()
        self.explicit = False
        self.failed = False
        self.default_read_only = False  # SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY

    def _reset(self) -> None:
        self.explicit = False
        self.implicit = False  # the extended protocol's implicit transaction (ends at Sync)
        self.failed = False
        self.read_only = False
        self.access = Access.NONE
        self.timestamp: int | None = None
        self.writes: list[Staged] = []
        self.savepoints: list[tuple[str, int]] = []
        self.held: list[Any] = []
        """What the IO side holds for this transaction (read holds at `timestamp`); a new list
        when the transaction ends, so the IO side releases the old one's."""

    @property
    def status(self) -> str:
        if not self.explicit or self.implicit:
            return "I"
        return "E" if self.failed else "T"

    @property
    def in_block(self) -> bool:
        """Inside a transaction block (`BEGIN`), not just an implicit transaction."""
        return self.explicit and not self.implicit

    @property
    def table(self) -> str | None:
        return self.writes[0].table if self.writes else None

    # -- transaction control ----------------------------------------------------------------

    def control(self, word: str, sql: str) -> Commit:
        """`BEGIN`/`COMMIT`/`ROLLBACK`/`SAVEPOINT`/`RELEASE`/`ROLLBACK TO` (`word` as
        `shims.classify` names them); returns the tag and, for COMMIT, the writes to apply."""
        if word == "BEGIN":
            if self.failed:
                raise TransactionError(ABORTED, "25P02")
            if self.implicit:  # BEGIN inside an implicit transaction makes it a block
                self.implicit = False
                self.read_only = bool(_READ_ONLY.search(sql))
            elif not self.explicit:
                self._reset()
                self.explicit = True
                self.read_only = bool(_READ_ONLY.search(sql)) or (
                    self.default_read_only and not _READ_WRITE.search(sql))
            else:
                return Commit("BEGIN", warning=ALREADY)
            return Commit("BEGIN")
        if word == "ROLLBACK" and _SAVEPOINT.match(sql):
            return self._rollback_to(sql)
        if self.failed and word not in ("COMMIT", "ROLLBACK"):
            raise TransactionError(ABORTED, "25P02")
        # COMMIT/ROLLBACK outside a block (none, or an implicit transaction, which they end
        # as PostgreSQL's do) come with PostgreSQL's warning.
        warning = None if self.in_block else NO_TRANSACTION
        if word == "COMMIT":
            writes = [] if self.failed else self.writes
            tag = "ROLLBACK" if self.failed else "COMMIT"
            self._reset()
            return Commit(tag, writes, warning)
        if word == "ROLLBACK":
            self._reset()
            return Commit("ROLLBACK", warning=warning)
        if not self.in_block:
            what = "SAVEPOINT" if word == "SAVEPOINT" else "RELEASE SAVEPOINT"
            raise TransactionError(f"{what} can only be used in transaction blocks", "25P01")
        name = self._savepoint_name(sql)
        if word == "SAVEPOINT":
            self.savepoints.append((name, len(self.writes)))
            return Commit("SAVEPOINT")
        if word == "RELEASE":
            self._find(name)
            del self.savepoints[self._find(name):]
            return Commit("RELEASE")
        return Commit(word)

    def _savepoint_name(self, sql: str) -> str:
        m = _SAVEPOINT.match(sql)
        return m.group(1).lower() if m else ""

    def _find(self, name: str) -> int:
        for i in range(len(self.savepoints) - 1, -1, -1):
            if self.savepoints[i][0] == name:
                return i
        raise TransactionError(f"savepoint \"{name}\" does not exist", "3B001")

    def _rollback_to(self, sql: str) -> Commit:
        if not self.in_block:
            raise TransactionError("ROLLBACK TO SAVEPOINT can only be used in transaction "
                                   "blocks", "25P01")
        i = self._find(self._savepoint_name(sql))
        del self.savepoints[i + 1:]
        del self.writes[self.savepoints[i][1]:]
        self.failed = False
        if not self.writes and self.access is Access.WRITE:
            self.access = Access.NONE
        return Commit("ROLLBACK")

    def characteristics(self, sql: str) -> bool:
        """`SET [SESSION CHARACTERISTICS AS] TRANSACTION ...`: apply its access mode; whether
        `sql` was one (the caller still answers it as a SET)."""
        m = _CHARACTERISTICS.match(sql)
        if m is None:
            return False
        ro, rw = bool(_READ_ONLY.search(sql)), bool(_READ_WRITE.search(sql))
        if m.group(1):
            if ro or rw:
                self.default_read_only = ro
            return True
        if rw and self.explicit and self.read_only and self.access is not Access.NONE:
            raise TransactionError("transaction read-write mode must be set before any query",
                                   "25001")
        if self.explicit and (ro or rw):
            self.read_only = ro
        return True

    def begin_implicit(self) -> None:
        """A write outside `BEGIN` in the extended protocol: the statements until Sync are one
        transaction (PostgreSQL's implicit transaction), under the rules of a block."""
        if not self.explicit:
            self._reset()
            self.explicit = self.implicit = True
            self.read_only = False

    def end_implicit(self) -> list[Staged]:
        """Sync ends the implicit transaction: the writes to apply (none if it failed)."""
        writes = [] if self.failed else self.writes
        self._reset()
        return writes

    # -- statements -------------------------------------------------------------------------

    def check(self, kind: Kind, table: str | None = None) -> Action:
        """How to run a statement of `kind` (writing `table`); raises `TransactionError` if the
        transaction's state refuses it."""
        if self.failed:
            raise TransactionError(ABORTED, "25P02")
        if not self.explicit or kind in (Kind.FREE, Kind.DDL):
            return Action.RUN
        if kind is Kind.WRITE:
            if self.read_only or self.access in (Access.READ, Access.SUBSCRIBE):
                raise TransactionError(READ_ONLY_MODE, "25006")
            if self.table is not None and table != self.table:
                raise TransactionError(ONE_TABLE, "25000", ONE_TABLE_HINT)
            self.access = Access.WRITE
            return Action.STAGE
        if self.access is Access.WRITE:
            raise TransactionError(WRITE_ONLY_MODE, "25000", READ_AFTER_WRITE_HINT)
        if kind is Kind.SUBSCRIBE:
            if self.access is not Access.NONE:
                raise TransactionError(SUBSCRIBE_ONLY, "25000")
            self.access = Access.SUBSCRIBE
            return Action.RUN
        if self.access is Access.SUBSCRIBE:
            raise TransactionError(SUBSCRIBE_ONLY, "25000")
        self.access = Access.READ
        if kind is Kind.READ_AS_OF:
            return Action.RUN
        return Action.READ_CHOOSE if self.timestamp is None else Action.READ_AT

    def pin(self, timestamp: int) -> None:
        """The first read of the transaction read at `timestamp`: later reads read there."""
        if self.explicit and self.timestamp is None:
            self.timestamp = timestamp

    def stage(self, write: Staged) -> None:
        self.writes.append(write)

    def fail(self) -> None:
        """A statement failed: inside `BEGIN` the transaction is failed until it ends."""
        if self.explicit:
            self.failed = True
