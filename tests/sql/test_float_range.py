"""Float range errors as PostgreSQL raises them (22003), checked differentially.

- `+ - * /` of doubles, `text::double precision` and `sum` over random rows against PostgreSQL
  (a throwaway cluster; skipped with the reason when none starts): the same values, or an
  error whose SQLSTATE PostgreSQL raises for one of the rows.
- The engine's float `sum` (accumulated and recomputed) over random insert/delete histories of
  huge values: at every time the exactly rounded sum, or `value out of range: overflow`
  exactly when the exact sum of finite values is beyond the double range — and the error
  retracts with the rows that caused it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.sql.pgcompare import fresh_database, load_both, rows_or_same_error

import twofold
from twofold.engine.functions import OVERFLOW
from twofold.engine.testing import run_plan_at_times
from twofold.protocol import Aggregate, ColumnType, Get, GlobalId, Reduce, RelationDesc
from twofold.sql.errors import sqlstate_of
from twofold.testing.profiles import examples

COLS = "id int, x double precision, y double precision, s text"
BIG = sys.float_info.max
_FLOATS = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.5, 1e308, -1e308, BIG, 1e300, 1e-300, -1e-300,
                     5e-324, 1e-310, 1e154, 1e-162, float("inf"), float("-inf"),
                     float("nan")]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
)
_TEXT = st.one_of(
    st.sampled_from(["1e400", "-1e400", "1e-400", "2e-324", "4.9e-324", "1e-320", "inf",
                     "-Infinity", "NaN", "+nan", " 1.5 ", "1.", " .5e1", "0e-999", "-0",
                     "0.000e999", "abc", "", "1e", "infinit", "1_000", "+-1",
                     "00001e-400", "1e308", "1.8e308"]),
    st.floats(allow_nan=False).map(repr),
    st.none(),
)
_ROWS = st.lists(st.tuples(_FLOATS, _FLOATS, _TEXT), min_size=1, max_size=6)
EXPRS = ["x + y", "x - y", "x * y", "x / y", "y / x", "-x", "abs(x) * 1e300", "x * 1e-300",
         "x / 1e-10", "s::double precision", "cast(s as float)", "degrees(x)", "radians(x)"]


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    """A fresh database in the session's PostgreSQL (skips with the reason if none starts)."""
    with fresh_database(servers, "fr") as con:
        con.execute(f"CREATE TABLE f ({COLS})")
        con.execute("CREATE TABLE g (k int, x double precision)")
        yield con


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        database.sql(f"CREATE TABLE f ({COLS})")
        database.sql("CREATE TABLE g (k int, x double precision)")
        yield database


def _same(a: Any, b: Any, rel: float = 0.0) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b or math.isclose(a, b, rel_tol=rel)
    return bool(a == b) and type(a) is type(b)


def _pg_each(pg: Any, sql: str, keys: list[Any]) -> tuple[dict[Any, Any], set[str]]:
    """PostgreSQL's value per key (`sql` formatted with one key), and the SQLSTATEs raised."""
    import psycopg

    values, states = {}, set()
    for k in keys:
        try:
            row = pg.execute(sql.format(k)).fetchone()
            values[k] = row[0] if row is not None else None
        except psycopg.Error as e:
            states.add(str(e.sqlstate))
    return values, states


def _check(db: twofold.Database, sql: str, expected: tuple[dict[Any, Any], set[str]],
           rel: float = 0.0) -> None:
    values, states = expected
    rows = rows_or_same_error(db, sql, states)
    if rows is None:
        return
    got = dict(rows)
    for k, want in values.items():
        assert _same(got.get(k), want, rel), (
            f"{sql} at {k}: twofold {got.get(k)!r}, PostgreSQL {want!r}")


@settings(max_examples=examples(15), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS)
def test_float_arithmetic_and_casts_against_postgres(db: twofold.Database, pg: Any,
                                                     rows: list[tuple[Any, ...]]) -> None:
    ids = load_both(db, pg, "f", rows)
    for expr in EXPRS:
        expected = _pg_each(pg, f"SELECT {expr} FROM f WHERE id = {{}}", ids)
        # degrees/radians may differ from PostgreSQL's in the last bit (test_functions).
        _check(db, f"SELECT id, {expr} FROM f", expected, 4e-16 if "(" in expr else 0.0)


# Per group one sign, so every order of PostgreSQL's running sum overflows exactly when the
# total does (no value lies near the boundary) — its answer is then a function of the rows.
_MAGNITUDES = st.sampled_from([1e308, 1.7e308, 1e307, 1.0, 2.5, 1e300, None])
_GROUPED = st.lists(st.tuples(st.integers(0, 3), _MAGNITUDES), min_size=1, max_size=8)


@settings(max_examples=examples(10), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_GROUPED, special=st.sampled_from([None, float("inf"), float("-inf"), float("nan")]))
def test_float_sum_overflow_against_postgres(db: twofold.Database, pg: Any,
                                             rows: list[tuple[int, float | None]],
                                             special: float | None) -> None:
    signed = [(k, None if v is None else (v if k % 2 == 0 else -v)) for k, v in rows]
    if special is not None:
        signed.append((4, special))  # with small values only: no overflow in any order
        signed.append((4, 1.0))
    pg.execute("DELETE FROM g")
    with pg.cursor() as cur:
        cur.executemany("INSERT INTO g VALUES (%s, %s)", signed)
    db.sql("DELETE FROM g")
    db.table("g").insert(signed)
    keys = sorted({k for k, _ in signed})
    for agg in ("sum(x)", "sum(DISTINCT x)"):
        expected = _pg_each(pg, f"SELECT {agg} FROM g WHERE k = {{}}", keys)
        _check(db, f"SELECT k, {agg} FROM g GROUP BY k", expected)
        if special is None and len({k % 2 for k in keys}) == 1:  # one sign: order-free
            total = _pg_each(pg, f"SELECT {agg} FROM g WHERE {{}}", [True])
            _check(db, f"SELECT true, {agg} FROM g", total)


def test_float_range_errors_and_postgres_messages(db: twofold.Database) -> None:
    """The SQLSTATEs and messages PostgreSQL gives (checked against it by the tests above);
    NaN / 0 is NaN, as in PostgreSQL; avg of a tiny sum is IEEE's quotient, unchecked."""
    cases = {
        "SELECT 1e308::float8 * 10": ("22003", "value out of range: overflow"),
        "SELECT 1e-300::float8 * 1e-300": ("22003", "value out of range: underflow"),
        "SELECT 1e-300::float8 / 1e300": ("22003", "value out of range: underflow"),
        "SELECT '1e400'::float8": ("22003", '"1e400" is out of range for type double'),
        "SELECT '2e-324'::double precision": ("22003", "out of range"),
        "SELECT '0x10'::float8": ("22P02", "invalid input syntax"),
        "SELECT '99999999999999999999'::bigint": ("22003", "out of range for type bigint"),
        "SELECT '1_000'::bigint": ("22P02", "invalid input syntax"),
    }
    for sql, (state, message) in cases.items():
        with pytest.raises(twofold.TwofoldError, match=message) as info:
            db.sql(sql)
        assert sqlstate_of(info.value) == state, sql
    rows = db.sql("SELECT 'nan'::float8 / 0, 'inf'::float8 * 2, ' -Infinity '::float8, "
                  "avg(x) FROM (VALUES (5e-324::float8), (0.0), (0.0)) t(x)").rows
    assert math.isnan(rows[0][0]) and rows[0][1:] == (math.inf, -math.inf, 0.0)
    # PostgreSQL averages bigints in numeric: a sum beyond the bigint range is no error.
    big = "(VALUES (9000000000000000000::int8), (9000000000000000000::int8), (3::int8)) t(x)"
    assert db.sql(f"SELECT avg(x), sum(x::float8) FROM {big}").rows == [(6e18, 1.8e19)]
    with pytest.raises(twofold.TwofoldError, match="out of range") as info:
        db.sql(f"SELECT sum(x) FROM {big}")  # PostgreSQL: a numeric twofold does not have
    assert sqlstate_of(info.value) == "22003"


# -- the engine's maintained float sum ---------------------------------------------------------

A = GlobalId.user(1)
FLOAT, INT = ColumnType("float"), ColumnType("int")
DESC = RelationDesc(["k", "x"], [INT, FLOAT])
_HUGE = st.sampled_from([1e308, -1e308, BIG, -BIG, 1e307, 1.0, 5e-324, float("inf"),
                         float("nan"), None])
_HISTORY = st.lists(st.tuples(st.integers(0, 1), _HUGE, st.booleans()), min_size=1, max_size=10)


def _exact_sum(values: list[float]) -> float | str | None:
    if not values:
        return None
    special = [v for v in values if not math.isfinite(v)]
    if special:
        if any(math.isnan(v) for v in special) or len(set(special)) > 1:
            return math.nan
        return special[0]
    exact = sum((Fraction(v) for v in values), Fraction(0))
    try:
        return float(exact)
    except OverflowError:
        return OVERFLOW


@settings(max_examples=examples(25))
@given(history=_HISTORY, accumulated=st.booleans())
def test_maintained_float_sum_overflow_retracts(history: list[tuple[int, Any, bool]],
                                                accumulated: bool) -> None:
    """Insert a row per time, or delete an earlier one; the sum per key at every time is the
    exact sum, or the overflow error while the held values overflow (and gone after)."""
    updates: list[tuple[list[Any], int, int]] = []
    live: list[list[Any]] = []
    held_at: list[list[list[Any]]] = []  # the rows held at each time
    for t, (k, x, delete) in enumerate(history):
        if delete and live:
            updates.append((live.pop(0), t, -1))
        else:
            live.append([k, x])
            updates.append(([k, x], t, 1))
        held_at.append(list(live))
    aggs = [Aggregate("sum", 1)] if accumulated else [Aggregate("sum", 1), Aggregate("max", 0)]
    times = list(range(len(history)))
    got = run_plan_at_times(Reduce(Get(A), [0], aggs), {A: (DESC, updates)}, times)
    for t in times:
        groups: dict[int, list[float]] = {}
        for k, x in held_at[t]:
            groups.setdefault(k, [])
            if x is not None:
                groups[k].append(x)
        sums = {k: _exact_sum(vals) for k, vals in groups.items()}
        if any(s == OVERFLOW for s in sums.values()):
            assert got[t] == OVERFLOW, (t, got[t], sums)
            continue
        rows = got[t]
        assert isinstance(rows, list), (t, rows, sums)
        out = {row[0]: row[1] for row, _ in rows}
        assert set(out) == set(sums), (t, out, sums)
        for k, want in sums.items():
            assert _same(out[k], want), (t, k, out[k], want)


def test_materialized_view_read_fails_with_the_overflow_and_recovers() -> None:
    with twofold.open(tick_interval=0.005, timeout=10) as db:  # load: the view starts
        db.sql("CREATE TABLE w (k int, x double precision)")
        db.sql("CREATE MATERIALIZED VIEW ws AS SELECT k, sum(x) AS s FROM w GROUP BY k")
        db.sql("INSERT INTO w VALUES (1, 1e308), (1, 1e308)")
        with pytest.raises(twofold.TwofoldError) as info:
            db.sql("SELECT * FROM ws")
        assert sqlstate_of(info.value) == "22003", info.value
        db.sql("DELETE FROM w WHERE x = 1e308")
        assert db.sql("SELECT * FROM ws").rows == []
