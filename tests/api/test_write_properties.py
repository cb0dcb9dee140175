"""Property tests: random histories of checked writes — inserts, deletes and updates of rows with
duplicates, NULLs and adversarial floats, upserts, key deletes, predicate deletes and updates —
leave a table equal to a Python model multiset (never negative) after every write, and equal to
the same history run through DuckDB as SQL DML where the two are comparable."""

from __future__ import annotations

import itertools
import math
import struct
from collections import Counter
from collections.abc import Iterator
from typing import Any

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import twofold
from twofold import col
from twofold.storage import to_tuples
from twofold.testing.profiles import examples

Row = tuple[int, float | None, str | None]
_names = itertools.count()


@pytest.fixture(scope="module")
def mdb() -> Iterator[twofold.Database]:
    with twofold.open(tick_interval=0.05, timeout=30) as database:
        yield database


def norm(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """SQL equality as a hashable key: one NaN, -0.0 = 0.0 (Python's == already has that)."""
    return tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in row)


def ident(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A row's stored identity (how `delete(rows)` names rows): floats by their bits, one NaN,
    so -0.0 and 0.0 are two rows."""
    return tuple(("NaN" if math.isnan(v) else struct.pack("<d", v)) if isinstance(v, float)
                 else v for v in row)


def stored(t: twofold.Table) -> Counter[tuple[Any, ...]]:
    """The shard's exact multiplicities by stored identity (a negative one would show here)."""
    out: Counter[tuple[Any, ...]] = Counter()
    for r, _, d in to_tuples(t._table.snapshot()):
        out[ident(tuple(r))] += d
    return out


floats = st.sampled_from([0.0, -0.0, 0.1, 0.2, 1e16, -1.5, math.inf, -math.inf, math.nan, None])
rows = st.tuples(st.integers(0, 3), floats, st.sampled_from(["a", "b", None]))
row_lists = st.lists(rows, min_size=1, max_size=5)

# Predicates and assignments, each with its Python meaning under SQL rules (NULL is not true;
# NaN equals NaN and is greater than every other float, as in polars and DuckDB).


def _gt(v: float | None, c: float) -> bool:
    return v is not None and (math.isnan(v) or v > c)


PREDICATES: list[tuple[str, Any, Any, str]] = [
    ("v > 0.15", col("v") > 0.15, lambda r: _gt(r[1], 0.15), "v > 0.15"),
    ("k == 1", col("k") == 1, lambda r: r[0] == 1, "k = 1"),
    ("s is null", col("s").is_null(), lambda r: r[2] is None, "s IS NULL"),
    ("k == 2 | v > 1", (col("k") == 2) | (col("v") > 1.0),
     lambda r: r[0] == 2 or _gt(r[1], 1.0), "k = 2 OR v > 1.0"),
]
SETTERS: list[tuple[str, Any, Any, str]] = [
    ("v + 1", {"v": col("v") + 1.0},
     lambda r: (r[0], None if r[1] is None else r[1] + 1.0, r[2]), "v = v + 1.0"),
    ("s = 'x'", {"s": "x"}, lambda r: (r[0], r[1], "x"), "s = 'x'"),
    ("k = k + 1", {"k": col("k") + 1}, lambda r: (r[0] + 1, r[1], r[2]), "k = k + 1"),
]


def op_args(op: str, known: list[Row]) -> st.SearchStrategy[Any]:
    """Arguments of one write; deletes and updates mostly name rows the table has held, with
    duplicates, so that deleting more copies than are held is common."""
    some = st.one_of(rows, st.sampled_from(known)) if known else rows
    listed = st.lists(some, min_size=1, max_size=5)
    if op == "insert":
        return st.lists(st.one_of(rows, st.sampled_from(known)) if known else rows,
                        min_size=1, max_size=5)
    if op == "delete":
        return listed
    if op == "update":
        return st.lists(st.tuples(some, rows), min_size=1, max_size=4)
    if op == "delete_where":
        return st.sampled_from(range(len(PREDICATES)))
    return st.tuples(st.sampled_from(range(len(SETTERS))),
                     st.sampled_from(range(len(PREDICATES))))


OPS = ["insert", "delete", "update", "delete_where", "update_where"]


class Model:
    """The table as a Python multiset, with the write semantics of `docs/semantics.md`."""

    def __init__(self) -> None:
        self.rows: Counter[tuple[Any, ...]] = Counter()
        self.values: dict[tuple[Any, ...], Row] = {}

    def add(self, row: Row, n: int = 1) -> None:
        self.rows[ident(row)] += n
        self.values.setdefault(ident(row), row)

    def remove(self, key: tuple[Any, ...], n: int) -> None:
        self.rows[key] -= n
        if not self.rows[key]:
            del self.rows[key]

    def live(self) -> list[tuple[Row, int]]:
        return [(self.values[k], n) for k, n in self.rows.items()]

    def by_sql_equality(self) -> Counter[tuple[Any, ...]]:
        """The multiset as DuckDB tells it (SQL equality: -0.0 = 0.0)."""
        out: Counter[tuple[Any, ...]] = Counter()
        for r, n in self.live():
            out[norm(r)] += n
        return out

    def delete(self, given: list[Row]) -> int:
        asked = Counter(ident(r) for r in given)
        done = 0
        for k, n in asked.items():
            gone = min(n, self.rows.get(k, 0))
            if gone:
                self.remove(k, gone)
                done += gone
        return done

    def update(self, pairs: list[tuple[Row, Row]]) -> list[tuple[Row, Row]]:
        """Pairs whose old row the table held *before* the write (the k-th copy of a row needs
        more than k copies held) apply."""
        seen: Counter[tuple[Any, ...]] = Counter()
        applied = []
        for old, new in pairs:
            k = ident(old)
            if seen[k] < self.rows.get(k, 0):
                seen[k] += 1
                applied.append((old, new))
        for old, _ in applied:
            self.remove(ident(old), 1)
        for _, new in applied:
            self.add(new)
        return applied


def duck_row(row: Row) -> str:
    k, v, s = row
    fv = "NULL" if v is None else f"'{v!r}'::DOUBLE" if not math.isfinite(v) or v == 0 \
        else repr(v)
    if v is not None and v == 0:
        fv = "'-0.0'::DOUBLE" if math.copysign(1, v) < 0 else "0.0::DOUBLE"
    fs = "NULL" if s is None else f"'{s}'"
    return f"({k}, {fv}, {fs})"


def duck_match(row: Row) -> str:
    k, v, s = duck_row(row)[1:-1].split(", ")
    return f"k IS NOT DISTINCT FROM {k} AND v IS NOT DISTINCT FROM {v} " \
           f"AND s IS NOT DISTINCT FROM {s}"


def duck_contents(con: duckdb.DuckDBPyConnection) -> Counter[tuple[Any, ...]]:
    return Counter(norm(r) for r in con.execute("SELECT k, v, s FROM t").fetchall())


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.sampled_from(OPS), min_size=1, max_size=8), st.data())
def test_checked_writes_match_a_model_and_duckdb(mdb: twofold.Database, history: list[str],
                                                 data: st.DataObject) -> None:
    t = mdb.create_table(f"w{next(_names)}", {"k": int, "v": float, "s": str},
                         nullable=["v", "s"])
    model = Model()
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k BIGINT NOT NULL, v DOUBLE, s VARCHAR)")
    for op in history:
        arg = data.draw(op_args(op, list(model.values.values())), label=op)
        if op == "insert":
            assert t.insert(arg).count == len(arg)
            for r in arg:
                model.add(r)
            con.execute(f"INSERT INTO t VALUES {', '.join(map(duck_row, arg))}")
        elif op == "delete":
            # Which copies go is the model's (by stored identity: deleting -0.0 leaves a 0.0,
            # where DuckDB's IS NOT DISTINCT FROM matches either); the data is DuckDB's.
            before = Counter(model.rows)
            assert t.delete(arg).count == model.delete(arg)
            for k, n in before.items():
                if n - model.rows.get(k, 0):
                    con.execute(f"DELETE FROM t WHERE rowid IN (SELECT rowid FROM t WHERE "
                                f"{duck_match(model_row(k, arg))} "
                                f"LIMIT {n - model.rows.get(k, 0)})")
        elif op == "update":
            applied = model.update(arg)
            assert t.update([o for o, _ in arg], [n for _, n in arg]).count == len(applied)
            for old, _ in applied:  # which pairs apply is the model's; the data is DuckDB's
                con.execute(f"DELETE FROM t WHERE rowid IN (SELECT rowid FROM t WHERE "
                            f"{duck_match(old)} LIMIT 1)")
            if applied:
                con.execute(f"INSERT INTO t VALUES {', '.join(duck_row(n) for _, n in applied)}")
        elif op == "delete_where":
            _, expr, fn, sql = PREDICATES[arg]
            hit = [(r, n) for r, n in model.live() if fn(r)]
            assert t.delete(where=expr).count == builtin_sum(n for _, n in hit)
            for r, n in hit:
                model.remove(ident(r), n)
            assert con.execute(f"DELETE FROM t WHERE {sql}").fetchone() == (
                builtin_sum(n for _, n in hit),)
        else:
            s_i, p_i = arg
            _, sets, change, set_sql = SETTERS[s_i]
            _, expr, fn, sql = PREDICATES[p_i]
            hit = [(r, n) for r, n in model.live() if fn(r)]
            assert t.update(set=sets, where=expr).count == builtin_sum(n for _, n in hit)
            for r, n in hit:
                model.remove(ident(r), n)
            for r, n in hit:
                model.add(change(r), n)
            con.execute(f"UPDATE t SET {set_sql} WHERE {sql}")
        held = stored(t)
        assert all(n > 0 for n in held.values()), held
        assert held == model.rows
        assert duck_contents(con) == model.by_sql_equality()
    assert Counter(ident(r) for r in t.collect().rows) == model.rows


def model_row(k: tuple[Any, ...], given: list[Row]) -> Row:
    """A row given whose stored identity is `k`."""
    return next(r for r in given if ident(r) == k)


builtin_sum = sum

keyed_rows = st.tuples(st.integers(0, 4), st.sampled_from([0.5, -0.0, 0.0, math.nan, None]))
keyed_ops = st.one_of(
    st.tuples(st.just("insert"), st.lists(keyed_rows, min_size=1, max_size=3)),
    st.tuples(st.just("upsert"), st.lists(keyed_rows, min_size=1, max_size=3)),
    st.tuples(st.just("delete_keys"), st.lists(st.integers(0, 5), min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.lists(keyed_rows, min_size=1, max_size=3)),
    st.tuples(st.just("shift"), st.integers(0, 4)),
)


def duck_keyed(row: tuple[int, float | None]) -> str:
    return duck_row((row[0], row[1], None))[:-7] + ")"


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(keyed_ops, min_size=1, max_size=8))
def test_primary_key_writes_match_a_model_and_duckdb(mdb: twofold.Database,
                                                     history: list[tuple[str, Any]]) -> None:
    t = mdb.create_table(f"p{next(_names)}", {"k": int, "v": float}, primary_key="k")
    model: dict[int, tuple[int, float | None]] = {}
    con = duckdb.connect()
    con.execute("CREATE TABLE t (k BIGINT PRIMARY KEY, v DOUBLE)")
    for op, arg in history:
        keys = [r[0] for r in arg] if op in ("insert", "upsert") else []
        values = ", ".join(map(duck_keyed, arg)) if keys else ""
        if op == "upsert" and len(set(keys)) < len(keys):
            # PostgreSQL refuses one key twice in an upsert, and so do we; DuckDB lets the last
            # row win, so it is left out here.
            with pytest.raises(twofold.UniqueViolation, match=f"table '{t.name}'"):
                t.upsert(arg)
        elif op == "insert" and (len(set(keys)) < len(keys) or any(k in model for k in keys)):
            with pytest.raises(twofold.UniqueViolation, match=f"table '{t.name}'"):
                t.insert(arg)
            with pytest.raises(duckdb.ConstraintException):
                con.execute(f"INSERT INTO t VALUES {values}")
        elif op == "insert":
            assert t.insert(arg).count == len(arg)
            model.update({r[0]: r for r in arg})
            con.execute(f"INSERT INTO t VALUES {values}")
        elif op == "upsert":
            w = t.upsert(arg)
            assert (w.inserted, w.replaced) == (
                builtin_sum(k not in model for k in keys), builtin_sum(k in model for k in keys))
            model.update({r[0]: r for r in arg})
            con.execute(f"INSERT INTO t VALUES {values} ON CONFLICT (k) DO UPDATE SET "
                        "v = excluded.v")
        elif op == "delete_keys":
            present = {k for k in arg if k in model}
            assert t.delete(keys=arg).count == len(present)
            for k in present:
                del model[k]
            con.execute(f"DELETE FROM t WHERE k IN ({', '.join(map(str, arg))})")
        elif op == "delete":
            # The row held for its key must be the one given, by stored identity (-0.0 is not
            # 0.0 here); DuckDB deletes the keys the model says.
            hit = {r[0] for r in arg if r[0] in model and ident(model[r[0]]) == ident(r)}
            assert t.delete(arg).count == len(hit)
            for k in hit:
                del model[k]
                con.execute(f"DELETE FROM t WHERE k = {k}")
        else:  # shift the keys at or above `arg` up by one: unique unless it collides
            moved = {k + 1 if k >= arg else k: (k + 1 if k >= arg else k, v)
                     for k, (_, v) in model.items()}
            if len(moved) < len(model):
                with pytest.raises(twofold.UniqueViolation):
                    t.update(set={"k": col("k") + 1}, where=col("k") >= arg)
                with pytest.raises(duckdb.ConstraintException):
                    con.execute(f"UPDATE t SET k = k + 1 WHERE k >= {arg}")
            else:
                t.update(set={"k": col("k") + 1}, where=col("k") >= arg)
                model = moved
                con.execute(f"UPDATE t SET k = k + 1 WHERE k >= {arg}")
        held = stored(t)
        assert held == Counter(ident(r) for r in model.values())
        assert Counter(norm(r) for r in con.execute("SELECT k, v FROM t").fetchall()) == \
            Counter(norm(r) for r in model.values())
