"""The Python API's writes into a table made by SQL `CREATE TABLE` keep its declared types as
SQL's writes do (`api/writes.py`, `conform_declared`; `sql/types.py`, `check_declared_series`):
a text longer than a `varchar(n)`/`char(n)`, an integer outside `smallint`/`integer`, a float
that `real` cannot hold is `InvalidRows` and nothing is written — through insert (rows, dicts,
polars, Arrow), upsert, an update's new rows and update(set=); a row to find holding such a
value (a delete's rows or keys, an update's old rows) is in no row of the table, so it is an
absent row and changes nothing (spec/catalog.md) — and what is written is stored
as SQL stores it (a `char(n)` without its trailing spaces, spaces past a `varchar(n)`'s n
dropped, a `real` rounded to single precision). `db.sql` reads a `char(n)` blank-padded to n,
as PostgreSQL does (`api/results.py`, `char_padded`)."""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold import col, lit
from twofold.api.errors import InvalidRows
from twofold.sql.errors import sqlstate_of
from twofold.testing.profiles import examples

DDL = "create table {} (k int primary key, g int, s smallint, c char(3), v varchar(2), f real)"
COLUMNS = ("k", "g", "s", "c", "v", "f")


def _rows(db: twofold.Database, name: str = "t") -> Counter[tuple[Any, ...]]:
    return Counter(db.sql(f"select {', '.join(COLUMNS)} from {name}").rows)


def _table(db: twofold.Database, name: str = "t") -> twofold.Table:
    db.sql(DDL.format(name))
    db.sql(f"insert into {name} values (1, 1, 1, 'ab', 'x', 0.5)")
    return db.table(name)


BAD = [
    ({"c": "abcd"}, "value too long for type character(3)"),
    ({"v": "abc"}, "value too long for type character varying(2)"),
    ({"g": 2**31}, "integer out of range"),
    ({"g": -(2**31) - 1}, "integer out of range"),
    ({"s": 2**15}, "smallint out of range"),
    ({"f": 1e39}, "value out of range: overflow"),
    ({"f": 1e-46}, "value out of range: underflow"),
]
GOOD = {"k": 2, "g": 2, "s": 2, "c": "a", "v": "y", "f": 1.5}


def _forms(row: dict[str, Any]) -> list[Any]:
    frame = pl.DataFrame([row], schema={"k": pl.Int64, "g": pl.Int64, "s": pl.Int64,
                                        "c": pl.String, "v": pl.String, "f": pl.Float64})
    return [[row], [tuple(row[c] for c in COLUMNS)], frame, frame.to_arrow(),
            frame.to_arrow().to_batches()[0]]


@pytest.mark.parametrize(("bad", "message"), BAD)
def test_insert_refuses_what_sql_refuses_in_every_input_form(
        db: twofold.Database, bad: dict[str, Any], message: str) -> None:
    t = _table(db)
    before = _rows(db)
    for form in _forms({**GOOD, **bad}):
        with pytest.raises(InvalidRows, match=re.escape(message)) as refused:
            t.insert(form)
        assert sqlstate_of(refused.value) == ("22001" if "too long" in message else "22003")
        # one bad row among good ones: the whole batch is refused
        if isinstance(form, list):
            with pytest.raises(InvalidRows, match=re.escape(message)):
                t.insert([{**GOOD, "k": 7}, *form])
        assert _rows(db) == before
    # A table the Python API made has no declared types: the same values are its to keep.
    api = db.create_table(f"api_{abs(hash(message))}", {c: type(GOOD[c]) for c in COLUMNS})
    api.insert([{**GOOD, **bad}])
    assert len(api.collect().rows) == 1


def test_upsert_and_update_refuse_what_sql_refuses(db: twofold.Database) -> None:
    t = _table(db)
    before = _rows(db)
    stored = {"k": 1, "g": 1, "s": 1, "c": "ab", "v": "x", "f": 0.5}
    for bad, message in BAD:
        with pytest.raises(InvalidRows, match=re.escape(message)):
            t.upsert([{**stored, **bad}])
        with pytest.raises(InvalidRows, match=re.escape(message)):
            t.update([stored], [{**stored, **bad}])
        column, value = next(iter(bad.items()))
        with pytest.raises(InvalidRows, match=re.escape(message)):
            t.update(set={column: lit(value)})
        assert _rows(db) == before
    with pytest.raises(InvalidRows, match="integer out of range"):
        t.update(set={"g": col("g") * 2**31})  # a computed value out of int4
    with pytest.raises(InvalidRows, match="smallint out of range"):
        t.update(set={"s": col("g") + 2**15}, where=col("k") == 1)
    assert _rows(db) == before


@pytest.mark.parametrize(("bad", "message"), BAD)
def test_a_row_to_find_that_no_row_can_be_is_absent(db: twofold.Database, bad: dict[str, Any],
                                                    message: str) -> None:
    """Deleting (or updating) a row whose value the declared type could not hold deletes
    nothing and raises nothing (absent rows change nothing), alongside a present row that
    is deleted; as PostgreSQL's `DELETE ... WHERE v = 'abc'` on a `varchar(2)` finds no row.
    An update's new row is still refused, whatever its old row."""
    t = _table(db)
    stored = {"k": 1, "g": 1, "s": 1, "c": "ab", "v": "x", "f": 0.5}
    t.insert([GOOD])
    before = _rows(db)
    for form in _forms({**stored, **bad}):
        assert t.delete(form).count == 0
        assert _rows(db) == before
    assert t.update([{**stored, **bad}], [GOOD | {"k": 9}]).count == 0
    assert _rows(db) == before
    with pytest.raises(InvalidRows, match=re.escape(message)):
        t.update([{**stored, **bad}], [{**stored, **bad}])
    assert _rows(db) == before
    assert t.delete([{**stored, **bad}, GOOD]).count == 1  # the present one alone
    assert sorted(r[0] for r in _rows(db).elements()) == [1]  # GOOD (k 2) deleted
    if "k" not in bad:
        column, value = next(iter(bad.items()))
        if column in ("g", "s"):  # an out-of-range key of a table keyed by that column
            db.sql(f"create table kd_{column} (g int primary key, s smallint)")
            keyed = db.table(f"kd_{column}")
            keyed.insert([(1, 1)])
            if column == "g":
                assert keyed.delete(keys=[value]).count == 0
                assert keyed.delete(keys=[value, 1]).count == 1
    t.delete([stored])
    assert t.update([stored], [GOOD]).count == 0  # absent: the old row is gone


def test_written_values_are_stored_as_sql_stores_them(db: twofold.Database) -> None:
    t = _table(db)
    db.sql("create table u (k int primary key, g int, s smallint, c char(3), v varchar(2), "
           "f real)")
    row = (5, -(2**31), -(2**15), "ab ", "z   ", 0.1)
    t.insert([row])
    db.sql("insert into u values (5, -2147483648, -32768, 'ab ', 'z   ', 0.1)")
    assert _rows(db, "u") <= _rows(db)
    assert (5, -(2**31), -(2**15), "ab ", "z ", float(np.float32(0.1))) in _rows(db)
    # rows named for a delete or an update are read as they are stored, so they match
    assert t.delete([row]).count == 1
    t.insert([row])
    assert t.update([row], [(5, 0, 0, "abc  ", "zz ", 0.2)]).count == 1
    assert (5, 0, 0, "abc", "zz", float(np.float32(0.2))) in _rows(db)
    t.update(set={"c": lit("x  "), "f": lit(0.3)}, where=col("k") == 5)
    assert (5, 0, 0, "x  ", "zz", float(np.float32(0.3))) in _rows(db)
    assert db.sql("select k from t where c = 'x' and f = 0.3::real").rows == [(5,)]


# -- a property: random batches of valid and invalid rows --------------------------------------

_texts = st.text(alphabet="a\u00e9\u20ac ", max_size=5)  # 1-, 2- and 3-byte characters
_ints = st.sampled_from([0, 1, -1, 2**15 - 1, -(2**15), 2**15, 2**31 - 1, -(2**31), 2**31,
                         -(2**31) - 1, 2**40]) | st.integers(-(2**33), 2**33)
_floats = st.sampled_from([0.0, 0.1, -2.5, 1e38, 3.5e38, 1e39, 1e-45, 1e-46, float("inf")])
_row = st.tuples(_ints, _ints, _texts, _texts, _floats).map(list)
_batch = st.tuples(st.lists(_row | st.none(), min_size=1, max_size=6),
                   st.sampled_from(["tuples", "dicts", "polars", "arrow"]))
_names = itertools.count()


def _stored(r: list[Any]) -> tuple[Any, ...] | None:
    """Row `r` (g, s, c, v, f) as `db.sql` reads it back, or None if refused."""
    g, s, c, v, f = r
    if not -(2**31) <= g < 2**31 or not -(2**15) <= s < 2**15:
        return None
    if len(c.rstrip(" ")) > 3 or len(v.rstrip(" ")) > 2:
        return None
    with np.errstate(over="ignore"):
        single = float(np.float32(f))
    if (np.isinf(single) and not np.isinf(f)) or (single == 0.0 and f != 0.0):
        return None
    return (g, s, c[:3].rstrip(" ").ljust(3), v[:2], single)  # char(3) reads padded


def _form(rows: list[list[Any]], how: str) -> Any:
    names = ["k", "g", "s", "c", "v", "f"]
    if how == "tuples":
        return [tuple(r) for r in rows]
    if how == "dicts":
        return [dict(zip(names, r, strict=True)) for r in rows]
    frame = pl.DataFrame(rows, schema={"k": pl.Int64, "g": pl.Int64, "s": pl.Int64,
                                       "c": pl.String, "v": pl.String, "f": pl.Float64},
                         orient="row")
    return frame if how == "polars" else pa.Table.from_batches(frame.to_arrow().to_batches())


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(batches=st.lists(_batch, min_size=1, max_size=4))
def test_batches_land_exactly_or_not_at_all(db: twofold.Database,
                                            batches: list[tuple[list[Any], str]]) -> None:
    name = f"p{next(_names)}"
    db.sql(f"create table {name} (k int, g int, s smallint, c char(3), v varchar(2), f real)")
    t = db.table(name)
    model: Counter[tuple[Any, ...]] = Counter()
    key = 0
    for rows, how in batches:
        full = []
        for r in rows:
            key += 1
            full.append([key, *(r if r is not None else [None] * 5)])
        kept = [(r[0], *(_stored(r[1:]) or ())) if r[1] is not None else tuple(r)
                for r in full]
        valid = all(r[1] is None or _stored(r[1:]) is not None for r in full)
        if valid:
            assert t.insert(_form(full, how)).count == len(full)
            model.update(kept)
        else:
            with pytest.raises(InvalidRows, match="nothing was written"):
                t.insert(_form(full, how))
        assert _rows(db, name) == model


def test_db_sql_reads_char_n_blank_padded_as_postgres(db: twofold.Database) -> None:
    """`'ab'::char(3)` reads `'ab '` in PostgreSQL (and over twofold's pgwire); `db.sql` too,
    the first time a text runs and as a prepared statement after; a cast to text, `||` and
    `length` see the value without its padding, as PostgreSQL's."""
    _table(db)
    db.table("t").insert([(2, 0, 0, "x", "y", 0.0), (3, 0, 0, None, "y", 0.0)])
    query = "select k, c, c::text, c || '|', length(c) from t order by k"
    want = [(1, "ab ", "ab", "ab|", 2), (2, "x  ", "x", "x|", 1), (3, None, None, None, None)]
    assert db.sql(query).rows == want
    assert db.sql(query).rows == want  # the prepared path
    assert db.sql("select max(c) from t").rows == [("x  ",)]


def test_declared_types_are_kept_after_reopening(tmp_path: Any) -> None:
    """The declared types come from the durable catalog: a table reopened from storage (or
    seen by a second database on it) checks writes as the one that created it."""
    path = tmp_path / "db.sqlite"
    with twofold.open(path, tick_interval=0.01, timeout=20) as first:
        first.sql("create table r (c char(2), g int)")
        with (twofold.open(path, tick_interval=0.01, timeout=20) as second,
              pytest.raises(InvalidRows, match=re.escape("character(2)"))):
            second.table("r").insert([("abc", 1)])
    with twofold.open(path, tick_interval=0.01, timeout=20) as again:
        with pytest.raises(InvalidRows, match="integer out of range"):
            again.table("r").insert([("ab", 2**31)])
        again.table("r").insert([("a ", 1)])
        assert again.sql("select c, g from r").rows == [("a ", 1)]
