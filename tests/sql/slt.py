"""A sqllogictest runner: the SQLite project's record format, run against twofold, DuckDB or
PostgreSQL (a throwaway cluster, `twofold.testing.pgcluster`).

Records are separated by blank lines (`#` starts a comment line):

- `statement ok` / `statement error [SQLSTATE]`, then the SQL (one statement);
- `query <types> [nosort|rowsort|valuesort] [label]`, the SQL, `----`, then the expected
  values, one per line (a line holding several values separated by tabs is split); types are
  `I` (integers, `%d`; a float is truncated toward zero), `R` (`%.3f`), `T` (text); `NULL`
  for NULL, `(empty)` for an empty string; with more values than `hash-threshold N`, the
  expected result is `M values hashing to <md5>` (md5 over each value followed by a newline);
- `skipif <engine>` / `onlyif <engine>` before a record; `halt` stops the file.

`run_file(path, engine)` returns a `Report` (counts and the failures, each naming its line) —
so one file can be checked against both engines: DuckDB as the oracle of what the expected
results say, twofold as the system under test.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import twofold
from twofold.sql.errors import sqlstate_of


@dataclass
class Record:
    line: int
    kind: str  # "statement" or "query"
    sql: str
    expect_error: bool = False
    sqlstate: str | None = None
    types: str = ""
    sort: str = "nosort"
    expected: list[str] = field(default_factory=list)
    skip: set[str] = field(default_factory=set)
    only: set[str] = field(default_factory=set)
    threshold: int = 0


@dataclass
class Report:
    path: str
    engine: str
    passed: int = 0
    skipped: int = 0
    failures: list[str] = field(default_factory=list)


def parse_file(text: str) -> Iterator[Record]:
    lines = text.split("\n")
    i = 0
    threshold = 0
    skip: set[str] = set()
    only: set[str] = set()
    while i < len(lines):
        line = lines[i].rstrip("\r")
        words = line.split()
        if not words or words[0].startswith("#"):
            i += 1
            continue
        head = words[0]
        if head == "halt":
            return
        if head == "hash-threshold":
            threshold = int(words[1])
            i += 1
            continue
        if head in ("skipif", "onlyif"):
            (skip if head == "skipif" else only).add(words[1])
            i += 1
            continue
        start = i + 1
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() and lines[i].strip() != "----":
            body.append(lines[i])
            i += 1
        sql = "\n".join(body)
        rec = Record(start, head, sql, skip=skip, only=only, threshold=threshold)
        skip, only = set(), set()
        if head == "statement":
            rec.expect_error = words[1] == "error"
            rec.sqlstate = words[2] if len(words) > 2 and rec.expect_error else None
        elif head == "query":
            rec.types = words[1]
            rec.sort = words[2] if len(words) > 2 else "nosort"
            if i < len(lines) and lines[i].strip() == "----":
                i += 1
                while i < len(lines) and lines[i].strip():
                    rec.expected.extend(lines[i].rstrip("\r").split("\t"))
                    i += 1
        else:
            raise ValueError(f"line {start - 1}: unknown record {head!r}")
        yield rec


def fmt(value: Any, t: str) -> str:
    if value is None:
        return "NULL"
    if t == "I":
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, float):
            return str(int(value))
        return str(value)
    if t == "R":
        return f"{float(value):.3f}"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value)
    return "(empty)" if text == "" else "".join(c if " " <= c <= "~" else "@" for c in text)


def formatted(rec: Record, rows: list[tuple[Any, ...]]) -> list[str]:
    types = rec.types
    out_rows = [[fmt(v, types[j] if j < len(types) else "T") for j, v in enumerate(r)]
                for r in rows]
    if rec.sort == "rowsort":
        out_rows.sort()
    values = [v for r in out_rows for v in r]
    if rec.sort == "valuesort":
        values.sort()
    if rec.threshold and len(values) > rec.threshold:
        digest = hashlib.md5("".join(v + "\n" for v in values).encode()).hexdigest()
        return [f"{len(values)} values hashing to {digest}"]
    return values


class TwofoldEngine:
    name = "twofold"

    def __init__(self, storage: str | None = None) -> None:
        """`storage`: `twofold.open`'s (None: the default placement, a scratch SQLite file and
        maintenance in a process of its own)."""
        self.db = twofold.open(storage, tick_interval=0.005, timeout=60)

    def statement(self, sql: str) -> None:
        self.db.sql(sql)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.db.sql(sql).rows)

    def sqlstate(self, e: BaseException) -> str | None:
        return sqlstate_of(e)

    def close(self) -> None:
        self.db.close()


class DuckEngine:
    name = "duckdb"

    def __init__(self) -> None:
        import duckdb

        self.con = duckdb.connect()

    def statement(self, sql: str) -> None:
        self.con.execute(sql)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.con.execute(sql).fetchall()]

    def sqlstate(self, e: BaseException) -> str | None:
        return None

    def close(self) -> None:
        self.con.close()


class PostgresEngine:
    """A fresh database in a throwaway PostgreSQL cluster (`twofold.testing.pgcluster`),
    autocommit; SQLSTATEs are checked against PostgreSQL's own. With `con` (an autocommit
    connection to a fresh database, e.g. `pgcompare.fresh_database`'s in the session's
    cluster) no cluster is started; the caller closes `con`."""

    name = "postgres"

    def __init__(self, con: Any = None) -> None:
        import psycopg

        from twofold.testing.pgcluster import PgCluster

        self.cluster: PgCluster | None = None
        if con is not None:
            self.con = con
            return
        self.cluster = PgCluster(fsync=False)
        try:
            self.con = psycopg.connect(self.cluster.url, autocommit=True)
        except BaseException:
            self.cluster.close()
            raise

    def statement(self, sql: str) -> None:
        self.con.execute(sql)  # type: ignore[arg-type]

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return [tuple(r) for r in self.con.execute(sql).fetchall()]  # type: ignore[arg-type]

    def sqlstate(self, e: BaseException) -> str | None:
        return getattr(e, "sqlstate", None)

    def close(self) -> None:
        if self.cluster is not None:
            self.con.close()
            self.cluster.close()


ENGINES: dict[str, Callable[[], Any]] = {"twofold": TwofoldEngine, "duckdb": DuckEngine,
                                         "postgres": PostgresEngine}


def run_file(path: Path | str, engine: str = "twofold", *,
             make: Callable[[], Any] | None = None) -> Report:
    """`make`: builds the engine instead of `ENGINES[engine]` (e.g. `TwofoldEngine` on other
    storage, `PostgresEngine` on a given connection); `engine` still names it for `skipif` /
    `onlyif`."""
    report = Report(str(path), engine)
    eng = (make or ENGINES[engine])()
    try:
        for rec in parse_file(Path(path).read_text()):
            if engine in rec.skip or (rec.only and engine not in rec.only):
                report.skipped += 1
                continue
            failure = _run(eng, rec)
            if failure is None:
                report.passed += 1
            else:
                report.failures.append(f"{path}:{rec.line}: {failure}\n  {rec.sql[:300]}")
    finally:
        eng.close()
    return report


def _run(eng: Any, rec: Record) -> str | None:
    if rec.kind == "statement":
        try:
            eng.statement(rec.sql)
        except Exception as e:
            if rec.expect_error:
                state = eng.sqlstate(e)
                if rec.sqlstate and state is not None and state != rec.sqlstate:
                    return f"expected SQLSTATE {rec.sqlstate}, got {state}: {e}"
                return None
            return f"statement failed: {type(e).__name__}: {e}"
        return "statement succeeded but an error was expected" if rec.expect_error else None
    try:
        rows = eng.query(rec.sql)
    except Exception as e:
        return f"query failed: {type(e).__name__}: {e}"
    got = formatted(rec, rows)
    expected = rec.expected
    if _is_hash(expected) and not _is_hash(got):
        digest = hashlib.md5("".join(v + "\n" for v in got).encode()).hexdigest()
        got = [f"{len(got)} values hashing to {digest}"]
    if rec.sort != "nosort" and not _is_hash(expected):
        expected = _resort(rec, expected)
    if got != expected:
        return f"wrong result: expected {expected[:12]}, got {got[:12]}"
    return None


def _is_hash(values: list[str]) -> bool:
    return len(values) == 1 and re.fullmatch(r"\d+ values hashing to [0-9a-f]{32}",
                                             values[0]) is not None


def _resort(rec: Record, values: list[str]) -> list[str]:
    width = max(len(rec.types), 1)
    if rec.sort == "valuesort":
        return sorted(values)
    rows = [values[i:i + width] for i in range(0, len(values), width)]
    return [v for r in sorted(rows) for v in r]
