"""`INSERT ... VALUES` with quoted literals into number and boolean columns: the literal takes
the column's type, as PostgreSQL's untyped literals do, and a literal the type cannot read is
`22P02` with nothing written (PostgreSQL 15 answers these statements the same way)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import twofold
from twofold.sql.errors import sqlstate_of


@pytest.fixture
def db() -> Iterator[twofold.Database]:
    d = twofold.open("memory://")
    d.sql("CREATE TABLE t (a bigint, f double precision, b boolean, s text)")
    try:
        yield d
    finally:
        d.close()


def test_quoted_literals_take_the_columns_types(db: twofold.Database) -> None:
    assert db.sql("INSERT INTO t VALUES ('5', '1.5', 'true', '7')") == 1
    assert db.sql("INSERT INTO t (a, f, b) VALUES (' 12 ', '-2', 'f')") == 1
    assert sorted(db.sql("SELECT * FROM t").rows, key=str) == [
        (12, -2.0, False, None), (5, 1.5, True, "7")]


@pytest.mark.parametrize("stmt", [
    "INSERT INTO t (a) VALUES ('x')",
    "INSERT INTO t (a) VALUES ('1.5')",
    "INSERT INTO t (f) VALUES ('one')",
    "INSERT INTO t (b) VALUES ('maybe')",
    "INSERT INTO t (a, s) VALUES ('1', 'ok'), ('z', 'no')",
])
def test_unreadable_literals_are_22p02_and_write_nothing(db: twofold.Database,
                                                         stmt: str) -> None:
    with pytest.raises(twofold.TwofoldError) as info:
        db.sql(stmt)
    assert sqlstate_of(info.value) == "22P02"
    assert db.sql("SELECT * FROM t").rows == []


def test_an_error_of_a_query_without_inputs_reads_cleanly(db: twofold.Database) -> None:
    with pytest.raises(twofold.QueryFailed) as info:
        db.sql("SELECT 1/0")
    assert sqlstate_of(info.value) == "22012"
    assert str(info.value) == "reading query failed: division by zero"


def test_bytea_literals_in_hex_and_escape_format(db: twofold.Database) -> None:
    db.sql("CREATE TABLE bin (b bytea)")
    assert db.sql(r"INSERT INTO bin VALUES ('\x01 02ff'), ('ab\\c\001'), ('é')") == 3
    assert sorted(db.sql("SELECT * FROM bin").rows) == [
        (b"\x01\x02\xff",), (b"ab\\c\x01",), ("é".encode(),)]
    assert db.sql(r"SELECT '\xDEAD'::bytea").rows == [(b"\xde\xad",)]
    for bad in (r"'\xzz'", r"'\x0'", r"'\q'", r"'\400'"):
        with pytest.raises(twofold.TwofoldError) as info:
            db.sql(f"INSERT INTO bin VALUES ({bad})")
        assert sqlstate_of(info.value) == "22P02", bad
    assert len(db.sql("SELECT * FROM bin").rows) == 3
