"""Least surprise in the API's errors (issue 12, item 5): colliding default aggregate names are
a `DuplicateColumn` naming both aggregates and suggesting `.alias()`; integers outside int64 are
a typed error naming the column and the value, and write nothing; `help(twofold)` shows the
API. An `as_of` outside the timestamp range is an `InvalidArgument`; a copy-to that gets no
answer within its timeout a `QueryTimeout`, as a query."""

from __future__ import annotations

import pydoc
import time
from pathlib import Path
from typing import Any

import pytest

import twofold
from twofold import col, count, max, mean, min, sum


@pytest.mark.parametrize(
    ("aggs", "first", "second"),
    [
        ((max("q"), mean("q")), "max(col('q'))", "mean(col('q'))"),
        ((min("q"), max("q")), "min(col('q'))", "max(col('q'))"),
        ((sum("q"), col("q").mean()), "sum(col('q'))", "mean(col('q'))"),
    ],
)
def test_colliding_default_aggregate_names_say_which_and_suggest_alias(
    db: twofold.Database, aggs: tuple[twofold.Agg, ...], first: str, second: str
) -> None:
    t = db.create_table("t", {"g": int, "q": float})
    with pytest.raises(twofold.DuplicateColumn, match=r"\.alias\(\)") as info:
        t.group_by("g").agg(*aggs)
    assert f"{first} and {second} both name their column 'q'" in str(info.value)
    assert info.value.column == "q"


def test_an_aggregate_named_like_a_group_key_collides(db: twofold.Database) -> None:
    t = db.create_table("t", {"q": int})
    with pytest.raises(twofold.DuplicateColumn, match="group key 'q' and max"):
        t.group_by("q").agg(max("q"))


def test_aliases_resolve_the_collision(db: twofold.Database) -> None:
    t = db.create_table("t", {"g": int, "q": float})
    t.insert([(1, 1.0), (1, 3.0)])
    rel = t.group_by("g").agg(max("q"), mean("q").alias("mean_q"), count())
    assert rel.schema.names == ("g", "q", "mean_q", "count")
    assert rel.collect().rows == [(1, 3.0, 2.0, 2)]


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 2**64, 10**30])
def test_an_int_outside_int64_is_a_typed_error_naming_the_column_and_writes_nothing(
    db: twofold.Database, value: int
) -> None:
    t = db.create_table("t", {"k": int, "n": int})
    t.insert([(1, 1)])
    with pytest.raises(twofold.InvalidRows, match=rf"column 'n': {value} is outside the int64"):
        t.insert([(2, 2), (3, value)])
    assert "C long" not in _message(t, value)
    assert t.collect().rows == [(1, 1)]


def _message(t: twofold.Table, value: int) -> str:
    try:
        t.insert([(9, value)])
    except twofold.InvalidRows as e:
        return str(e)
    raise AssertionError("no error")


def test_the_int64_bounds_themselves_are_fine(db: twofold.Database) -> None:
    t = db.create_table("t", {"n": int})
    t.insert([(2**63 - 1,), (-(2**63),)])
    assert sorted(t.collect().rows) == [(-(2**63),), (2**63 - 1,)]


def test_a_lookup_key_outside_int64_is_a_typed_error(db: twofold.Database) -> None:
    t = db.create_table("t", {"k": int})
    t.insert([(1,)])
    idx = db.create_index("by_k", t, key="k")
    with pytest.raises(twofold.TypeMismatch, match=r"column 'k'.*outside the int64 range"):
        idx.lookup(2**63)


def test_help_twofold_shows_the_api() -> None:
    text = pydoc.render_doc(twofold, renderer=pydoc.plaintext)  # type: ignore[attr-defined]
    for name in ("open", "open_async", "Database", "Table", "col", "ConnectionFailed",
                 "AuthenticationFailed", "QueryTimeout"):
        assert name in text, name
    assert "def open(" in text or "open(storage" in text  # the function itself, documented


@pytest.mark.parametrize("as_of", [2**64, 10**30, -1, 1.5, True])
@pytest.mark.parametrize("kind", ["query", "subscribe", "copy_to", "lookup"])
def test_an_as_of_outside_the_timestamp_range_is_invalid_argument(
        db: twofold.Database, tmp_path: Path, kind: str, as_of: Any) -> None:
    """Timestamps lie in [0, 2**64); one past it was a bare `ValueError` from the protocol
    ("a timestamp must lie in [0, 2**64), got ...")."""
    t = db.create_table("t", {"a": int})
    t.insert([(1,)])
    idx = db.create_index("i", t, key="a")
    with pytest.raises(twofold.InvalidArgument, match=r"as_of must be an int timestamp in "
                       r"\[0, 2\*\*64 - 1\], got "):
        if kind == "query":
            db.query(t, as_of=as_of)
        elif kind == "subscribe":
            db.subscribe(t, as_of=as_of).close()
        elif kind == "copy_to":
            db.copy_to(t, tmp_path / "out.csv", as_of=as_of)
        else:
            idx.lookup(1, as_of=as_of)
    assert db.query(t).rows == [(1,)]


def test_a_copy_to_with_no_answer_within_its_timeout_is_query_timeout(
        db: twofold.Database, tmp_path: Path) -> None:
    """As a query's: before, the controller's timeout came as `QueryFailed` ("... failed: no
    result within 0.3 s", XX000 over SQL). The copy is cancelled: the database reads on."""
    t = db.create_table("t", {"a": int})
    t.insert([(1,)])
    far = db.now() + 10**9  # a future time: the copy waits for it
    t0 = time.monotonic()
    with pytest.raises(twofold.QueryTimeout, match=r"reading table 't': no answer within 0.3 s"):
        db.copy_to(t, tmp_path / "out.csv", as_of=far, timeout=0.3)
    assert time.monotonic() - t0 < 5
    assert db.copy_to(t, tmp_path / "out.csv") == 1
    assert db.query(t).rows == [(1,)]


@pytest.mark.parametrize("up_to", [2**64, 2**70, -1, "x", 1.5, True])
def test_a_subscribe_up_to_outside_the_timestamp_range_is_invalid_argument(
        db: twofold.Database, up_to: Any) -> None:
    """Before: past 2**64 a bare `ValueError` from the protocol, a string a `TypeError`
    ("'<=' not supported ..."), -1 / 1.5 / True "must be after the start time"."""
    t = db.create_table("t", {"a": int})
    with pytest.raises(twofold.InvalidArgument, match=r"subscribe: up_to must be an int "
                       r"timestamp in \[0, 2\*\*64 - 1\], got "):
        db.subscribe(t, up_to=up_to).close()


@pytest.mark.parametrize("timeout", ["x", -1, 0, float("nan"), True])
@pytest.mark.parametrize("kind", ["query", "copy_to", "lookup"])
def test_a_read_timeout_that_is_not_a_positive_number_is_invalid_argument(
        db: twofold.Database, tmp_path: Path, kind: str, timeout: Any) -> None:
    """Before: a string was a bare `TypeError` ("unsupported operand type(s) for +: 'float'
    and 'str'"), a number <= 0 or NaN a `QueryTimeout` "no answer within -1 s", True one
    second."""
    t = db.create_table("t", {"a": int})
    t.insert([(1,)])
    idx = db.create_index("i", t, key="a")
    with pytest.raises(twofold.InvalidArgument, match=rf"^{kind}: timeout must be a positive "
                       r"number of seconds \(or None: the database's\), got "):
        if kind == "query":
            db.query(t, timeout=timeout)
        elif kind == "copy_to":
            db.copy_to(t, tmp_path / "out.csv", timeout=timeout)
        else:
            idx.lookup(1, timeout=timeout)
    assert db.query(t, timeout=float("inf")).rows == [(1,)]
