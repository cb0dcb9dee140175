"""Staged writes compose exactly like the same writes made one by one: a property test of
`twofold.server.staging` (random tables with duplicates and NULLs, with and without a primary
key; random INSERT/UPDATE/DELETE sequences): the row counts each statement reports, the error
(and its statement) where one fails, and the table after COMMIT equal those of running each
statement on its own on a twin table."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.server import staging
from twofold.server.cursors import Cursors
from twofold.server.transaction import Transaction
from twofold.sql.errors import sqlstate_of
from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_tables = itertools.count()
_v = st.none() | st.integers(-3, 3)
_k = st.integers(0, 5)
_op = st.one_of(
    st.tuples(st.just("insert"), st.lists(st.tuples(_k, _v), min_size=1, max_size=4)),
    st.tuples(st.just("update v"), st.integers(-2, 2), _k),
    st.tuples(st.just("update k"), st.integers(-1, 1), _v.filter(lambda v: v is not None)),
    st.tuples(st.just("delete k"), _k),
    st.tuples(st.just("delete v"), st.integers(-3, 3)),
    st.tuples(st.just("delete all")),
)


def _literal(v: int | None) -> str:
    return "NULL" if v is None else str(v)


def _sql(op: tuple[Any, ...], t: str) -> str:
    kind = op[0]
    if kind == "insert":
        return f"INSERT INTO {t} VALUES " + ", ".join(f"({k}, {_literal(v)})" for k, v in op[1])
    if kind == "update v":
        return f"UPDATE {t} SET v = v + {op[1]} WHERE k <= {op[2]}"
    if kind == "update k":
        return f"UPDATE {t} SET k = k + {op[1]} WHERE v = {op[2]}"
    if kind == "delete k":
        return f"DELETE FROM {t} WHERE k = {op[1]}"
    if kind == "delete v":
        return f"DELETE FROM {t} WHERE v > {op[1]}"
    return f"DELETE FROM {t}"


async def _run(db: Any, sql: Any) -> tuple[Any, str | None]:
    try:
        return await sql, None
    except Exception as e:  # the SQLSTATE is what is compared
        return None, sqlstate_of(e)


async def _check(db: Any, pk: bool, initial: list[tuple[int, int | None]],
                 ops: list[tuple[Any, ...]]) -> None:
    n = next(_tables)
    alone, staged = f"st_alone_{n}", f"st_staged_{n}"
    key = " PRIMARY KEY" if pk else ""
    for t in (alone, staged):
        await db.sql(f"CREATE TABLE {t} (k bigint{key}, v bigint)")
    rows = list({k: (k, v) for k, v in initial}.values()) if pk else initial
    if rows:
        for t in (alone, staged):
            await db.sql(_sql(("insert", rows), t))
    # One by one, until a statement fails.
    counts, failed = [], None
    for i, op in enumerate(ops):
        got, code = await _run(db, db.sql(_sql(op, alone)))
        if code is not None:
            failed = (i, code)
            break
        counts.append(got)
    # Staged in one transaction: the same counts, the same failure at the same statement.
    s = SimpleNamespace(db=db, tx=Transaction(), cursors=Cursors(db))
    await staging.control(s, "BEGIN")
    staged_counts = []
    for i, op in enumerate(ops):
        got, code = await _run(db, staging.sql(s, _sql(op, staged), None))
        if code is not None:
            assert failed == (i, code), (failed, i, code)
            break
        staged_counts.append(got)
    else:
        assert failed is None, failed
    assert staged_counts == counts
    # Nothing is visible before COMMIT; after it, the twin tables agree.
    before = sorted((await db.sql(f"SELECT k, v FROM {staged}")).rows, key=repr)
    assert before == sorted(rows, key=repr)
    if failed is not None:  # the failed transaction writes nothing: stage the prefix again
        await staging.control(s, "ROLLBACK")
        await staging.control(s, "BEGIN")
        for op in ops[:failed[0]]:
            await staging.sql(s, _sql(op, staged), None)
    await staging.control(s, "COMMIT")
    want = sorted((await db.sql(f"SELECT k, v FROM {alone}")).rows, key=repr)
    assert sorted((await db.sql(f"SELECT k, v FROM {staged}")).rows, key=repr) == want


@settings(max_examples=examples(15), deadline=None)
@given(pk=st.booleans(), initial=st.lists(st.tuples(_k, _v), max_size=6),
       ops=st.lists(_op, min_size=1, max_size=6))
def test_staged_writes_equal_writes_one_by_one(server: ServerHandle, pk: bool,
                                               initial: list[tuple[int, int | None]],
                                               ops: list[tuple[Any, ...]]) -> None:
    server.call(_check(server.db, pk, initial, ops), timeout=120)
