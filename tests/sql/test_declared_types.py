"""Declared column types (`docs/sql.md`, "Types"): the catalog records each SQL column's
declared type, and writes into `smallint`/`integer`/`real` columns behave as PostgreSQL's —
checked here against a real PostgreSQL (`servers` fixture) for random values near the bounds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.sql.pgcompare import fresh_database

import twofold
from twofold.catalog.entries import Entry, decode_entry, encode_entry
from twofold.protocol import ColumnType, GlobalId, RelationDesc
from twofold.sql.errors import sqlstate_of
from twofold.testing.profiles import examples

COLS = "i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision"


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with fresh_database(servers, "dt") as con:
        con.execute(f"CREATE TABLE t ({COLS})")
        yield con


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        database.sql(f"CREATE TABLE t ({COLS})")
        yield database


def _near(bound: int) -> st.SearchStrategy[int]:
    return st.integers(bound - 3, bound + 3)


INTS = st.one_of(*[_near(b) for b in (-(2**15), 2**15 - 1, -(2**31), 2**31 - 1)],
                 st.integers(-(2**40), 2**40))


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "ok", run()
    except Exception as e:  # the SQLSTATE is compared
        return "error", sqlstate_of(e) if isinstance(e, twofold.TwofoldError) else e.sqlstate


@settings(max_examples=examples(30), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(["i2", "i4", "i8"]), values=st.lists(INTS, min_size=1,
                                                                     max_size=3))
def test_integer_range_on_insert_against_postgres(db: twofold.Database, pg: Any, column: str,
                                                  values: list[int]) -> None:
    rows = ", ".join(f"({v})" for v in values)
    sql = f"INSERT INTO t ({column}) VALUES {rows}"
    pg.execute("DELETE FROM t")
    db.sql("DELETE FROM t")
    want = _outcome(lambda: pg.execute(sql) and None)
    got = _outcome(lambda: db.sql(sql) and None)
    assert got == want, sql
    pg_rows = sorted(pg.execute(f"SELECT {column} FROM t").fetchall())
    assert sorted(db.sql(f"SELECT {column} FROM t").rows) == pg_rows  # nothing half-written


def test_insert_select_and_messages(db: twofold.Database) -> None:
    db.sql("DELETE FROM t")
    db.sql("INSERT INTO t (i8) VALUES (1), (3000000000)")
    with pytest.raises(twofold.TwofoldError, match="integer out of range") as e:
        db.sql("INSERT INTO t (i4) SELECT i8 FROM t")
    assert sqlstate_of(e.value) == "22003"
    with pytest.raises(twofold.TwofoldError, match="smallint out of range"):
        db.sql("INSERT INTO t (i2) VALUES (32768)")
    assert db.sql("SELECT count(*) FROM t").rows == [(2,)]


@settings(max_examples=examples(20), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(x=st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300))
def test_real_range_as_postgres(db: twofold.Database, pg: Any, x: float) -> None:
    pg.execute("DELETE FROM t")
    db.sql("DELETE FROM t")
    want_outcome = _outcome(lambda: pg.execute("INSERT INTO t (f4, f8) VALUES (%s::float8, "
                                               "%s)", (x, x)) and None)
    got_outcome = _outcome(lambda: db.sql(f"INSERT INTO t (f4, f8) VALUES ({x!r}, {x!r})")
                           and None)
    assert got_outcome == want_outcome, x
    got = db.sql("SELECT f4, f8 FROM t").rows
    want = pg.execute("SELECT f4::float8, f8 FROM t").fetchall()
    # Stored as PostgreSQL stores it: rounded to single precision (docs/sql.md).
    assert got == want
    assert got == ([] if want == [] else [(float(np.float32(x)), x)])


def test_declared_types_are_durable(tmp_path: Path) -> None:
    path = str(tmp_path / "d.db")
    with twofold.open(path) as database:
        database.sql("CREATE TABLE u (a integer, b varchar(5), c real, d char(2))")
    with twofold.open(path) as database:
        entry = database.core._entries["u"]
        assert entry.pg_types == ["int4", "varchar(5)", "float4", "bpchar(2)"]
        with pytest.raises(twofold.TwofoldError, match="integer out of range"):
            database.sql("INSERT INTO u (a) VALUES (2147483648)")


def test_catalog_entries_before_declared_types_still_decode() -> None:
    desc = RelationDesc(names=["a"], types=[ColumnType(scalar="int", nullable=True)])
    new = Entry(name="t", kind="table", id=GlobalId.user(1), desc=desc)
    old = msgspec.msgpack.decode(encode_entry(new))
    old.pop("pg_types", None)
    entry = decode_entry(msgspec.msgpack.encode(old))
    assert entry.pg_types == []


@settings(max_examples=examples(20), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(column=st.sampled_from(["i2", "i4", "i8"]), start=st.lists(INTS, min_size=1, max_size=3),
       delta=st.integers(-5, 5))
def test_integer_range_on_update_against_postgres(db: twofold.Database, pg: Any, column: str,
                                                  start: list[int], delta: int) -> None:
    pg.execute("DELETE FROM t")
    db.sql("DELETE FROM t")
    for v in start:  # into bigint, which holds every drawn value
        pg.execute("INSERT INTO t (i8) VALUES (%s)", (v,))
        db.sql(f"INSERT INTO t (i8) VALUES ({v})")
    sql = f"UPDATE t SET {column} = i8 + {delta}"
    want = _outcome(lambda: pg.execute(sql) and None)
    got = _outcome(lambda: db.sql(sql) and None)
    assert got == want, sql
    query = f"SELECT i8, {column} FROM t"
    assert sorted(db.sql(query).rows) == sorted(pg.execute(query).fetchall())


def test_views_and_indexes_record_their_declared_types_durably(tmp_path: Path) -> None:
    """CREATE VIEW / MATERIALIZED VIEW / INDEX record their columns' declared types (an
    expression's: its PostgreSQL type, `a + b` integer, `a + d` bigint), and a query over
    them carries them in its result schema after a reopen too (`wire_type`: what a pgwire
    server announces)."""
    from twofold.sql.types import wire_type

    path = str(tmp_path / "v.db")
    with twofold.open(path) as database:
        database.sql("CREATE TABLE u (a integer, b smallint, c real, d bigint)")
        database.sql("CREATE VIEW uv AS SELECT a, c, a + b AS s, a + d AS w FROM u")
        database.sql("CREATE MATERIALIZED VIEW um AS SELECT b, max(c) AS m FROM u GROUP BY b")
        database.sql("CREATE INDEX ui ON u (a)")
    with twofold.open(path) as database:
        entries = database.core._entries
        assert entries["uv"].pg_types == ["int4", "float4", "int4", "int8"]
        assert entries["um"].pg_types == ["int2", "float4"]
        assert entries["ui"].pg_types == ["int4", "int2", "float4", "int8"]
        for query, want in [("SELECT * FROM uv", ["int4", "float4", "int4", "int"]),
                            ("SELECT * FROM um", ["int2", "float4"]),
                            ("SELECT * FROM ui", ["int4", "int2", "float4", "int"]),
                            ("SELECT v.a, m.m FROM uv v JOIN um m ON v.a = m.b",
                             ["int4", "float4"])]:
            assert [wire_type(t) for t in database.sql(query).schema.types] == want, query
        # The result schema's types are still the engine's where anything compares them.
        result = database.sql("SELECT a, c FROM u")
        assert result.schema.types[0].scalar == "int"
        assert result.to_polars().schema["a"] == pl.Int64
        dsl = database.query(database.table("u").select("a", "c"))
        assert result.schema == dsl.schema and hash(result.schema) == hash(dsl.schema)
        assert result.schema.desc() == dsl.schema.desc()
