"""sinh, cosh, tanh, asinh, acosh, atanh: differential against PostgreSQL 15 (float8 in,
float8 out, NULL on NULL; acosh below 1 and atanh outside [-1, 1] fail with 22003 "input is
out of range"; sinh/cosh past the float range are +-infinity, not an error, as PostgreSQL)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.sql.pgcompare import fresh_database, load_both
from tests.sql.test_functions import _compare

import twofold
from twofold.testing.profiles import examples

COLS = "id int, x double precision, k int"
TOTAL = ["sinh(x)", "cosh(x)", "tanh(x)", "asinh(x)", "sinh(k)", "cosh(k)", "tanh(k)",
         "asinh(k)", "acosh(abs(k) + 1)", "atanh(k * 0.25)"]
PARTIAL = ["acosh(x)", "atanh(x)", "acosh(k)", "atanh(k)"]

_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.999999, 1.000001, 2.0, 710.0, -710.0,
                     1e-320, 1e300, -1e300, float("inf"), float("-inf"), float("nan")]),
    st.none(),
)
_ROWS = st.lists(st.tuples(_FLOATS, st.one_of(st.integers(-4, 4), st.none())), min_size=1,
                 max_size=6)


@pytest.fixture(scope="module")
def pg(servers: Any) -> Iterator[Any]:
    with fresh_database(servers, "hyp") as con:
        con.execute(f"CREATE TABLE f ({COLS})")
        yield con


@pytest.fixture(scope="module")
def db() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.005, timeout=60) as database:
        database.sql(f"CREATE TABLE f ({COLS})")
        yield database


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=_ROWS)
def test_hyperbolic_functions_against_postgres(db: twofold.Database, pg: Any,
                                               rows: list[tuple[Any, ...]]) -> None:
    ids = load_both(db, pg, "f", rows)
    _compare(db, pg, TOTAL, ids)
    for expr in PARTIAL:
        _compare(db, pg, [expr], ids)


def test_hyperbolic_edges(db: twofold.Database, pg: Any) -> None:
    """The edges PostgreSQL special-cases, one row at a time so each error is that row's."""
    for v in (1.0, -1.0, 0.0, -0.0, 710.0, -710.0, float("inf"), float("-inf"), float("nan"),
              None, 1.5, -1.5, 0.75):
        ids = load_both(db, pg, "f", [(v, None)])
        for expr in TOTAL[:4] + PARTIAL[:2]:
            _compare(db, pg, [expr], ids)
