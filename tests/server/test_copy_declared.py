"""COPY FROM STDIN into columns declared smallint, integer and real refuses what PostgreSQL
refuses (22003, nothing written) and stores the rest, as INSERT does — text and csv, compared
with a real PostgreSQL 15. A real is stored rounded to single precision, as PostgreSQL stores it
(docs/sql.md): both read back as the same double."""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twofold.testing.pgwire import ServerHandle
from twofold.testing.profiles import examples

_DDL = "(k bigint, a smallint, b integer, r real)"
_INT2, _INT4 = 2**15, 2**31
_ints2 = st.integers(-_INT2 - 3, -_INT2 + 3) | st.integers(_INT2 - 3, _INT2 + 3) | st.none()
_ints4 = st.integers(-_INT4 - 3, -_INT4 + 3) | st.integers(_INT4 - 3, _INT4 + 3) | st.none()
_reals = (st.floats(allow_nan=False, allow_infinity=False, width=64) | st.none()
          | st.sampled_from([3.5e38, -3.5e38, 1e-46, 0.1, 1 / 3]))


def _copy(dsn: str, table: str, rows: Sequence[tuple[object, ...]], csv: bool) -> object:
    """The rows COPY left in `table`, or the SQLSTATE it failed with."""
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")
        c.execute(f"CREATE TABLE {table} {_DDL}")
        try:
            with c.cursor().copy(f"COPY {table} FROM STDIN" + (" (FORMAT csv)" if csv else "")
                                 ) as cp:
                for r in rows:
                    cp.write_row(r)
        except psycopg.Error as e:
            left = c.execute(f"SELECT count(*) FROM {table}").fetchone()
            return e.sqlstate, left
        got = c.execute(f"SELECT k, a, b, r::float8 FROM {table} ORDER BY k").fetchall()
        return [(k, a, b, None if r is None else float(r)) for k, a, b, r in got]


@given(st.lists(st.tuples(_ints2, _ints4, _reals), min_size=1, max_size=4), st.booleans())
@settings(max_examples=examples(25), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_copy_into_declared_columns_as_postgres(server: ServerHandle,
                                                postgres: tuple[str, int],
                                                rows: list[tuple[object, object, object]],
                                                csv: bool) -> None:
    host, port = postgres
    keyed = [(i, *r) for i, r in enumerate(rows)]
    want = _copy(f"host={host} port={port} user=postgres dbname=postgres", "copy_decl", keyed, csv)
    got = _copy(server.dsn(), "copy_decl", keyed, csv)
    assert got == want


def test_an_out_of_range_row_among_many_writes_nothing(server: ServerHandle) -> None:
    rows = [(k, 1, k, 0.5) for k in range(5000)] + [(5000, 1, 2**31, 0.5)]
    assert _copy(server.dsn(), "copy_decl_big", rows, csv=False) == ("22003", (0,))
    rows = [(k, 1, k, 0.1) for k in range(5000)] + [(5000, 1, 2, 1e39)]
    assert _copy(server.dsn(), "copy_decl_big", rows, csv=False) == ("22003", (0,))
    got = _copy(server.dsn(), "copy_decl_big", rows[:-1], csv=False)
    assert isinstance(got, list) and len(got) == 5000
