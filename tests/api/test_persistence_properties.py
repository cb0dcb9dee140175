"""Property: over random sequences of creates, drops, table writes and reopens of one SQLite
file, every materialized view and index always holds exactly what a one-off query of its
definition gives at the same time, and the catalog lists exactly the objects the model has.

Reopens here are in-process (a new `Database` on the same file, the old one closed);
`test_persistence.py` reopens in fresh processes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import twofold
from twofold import col, count, sum
from twofold.testing.profiles import examples

pytestmark = pytest.mark.timeout(600)

Definition = Callable[[twofold.Database], twofold.Relation]

DEFINITIONS: dict[str, Definition] = {
    "filter": lambda db: db.get("t").filter(col("x") > 2),
    "agg": lambda db: db.get("t").group_by("y").agg(count(), sum("x").alias("sx")),
    "map": lambda db: db.get("t").select((col("x") + col("y")).alias("s")),
}
CHAINED: dict[str, Callable[[twofold.Relation], twofold.Relation]] = {
    "chain": lambda v: v.select(v.columns[0]),        # a view over a view
    "over_index": lambda i: i.filter(col(i.columns[0]) >= 1),   # a view over an index
}

rows_ = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2)), min_size=1, max_size=4)
ops = st.one_of(
    st.tuples(st.just("insert"), rows_),
    st.tuples(st.just("delete"), rows_),
    st.tuples(st.just("view"), st.sampled_from(["a", "b", "c"]),
              st.sampled_from([*DEFINITIONS, *CHAINED])),
    st.tuples(st.just("index"), st.sampled_from(["i", "j"]), st.sampled_from(list(DEFINITIONS))),
    st.tuples(st.just("drop"), st.sampled_from(["a", "b", "c", "i", "j"])),
    st.tuples(st.just("reopen")),
)


def _open(path: Path) -> twofold.Database:
    return twofold.open(path, runtimes="one", tick_interval=0.01, timeout=30)


def _multiset(rows: list[tuple[Any, ...]]) -> Counter[tuple[Any, ...]]:
    return Counter(rows)


@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck))
@given(history=st.lists(ops, min_size=1, max_size=10))
@example(history=[("insert", [(3, 1), (4, 0)]), ("index", "i", "filter"),
                  ("view", "a", "over_index"), ("view", "b", "agg"), ("view", "c", "chain"),
                  ("reopen",), ("delete", [(3, 1)]), ("insert", [(5, 2)]), ("reopen",),
                  ("drop", "i"), ("insert", [(6, 1)])])
def test_maintained_objects_equal_one_off_queries_across_reopens(
        tmp_path_factory: pytest.TempPathFactory, history: list[tuple[Any, ...]]) -> None:
    path = tmp_path_factory.mktemp("prop") / "db.sqlite"
    db = _open(path)
    # The model: name -> (kind, how to rebuild its definition, the view it reads if chained).
    model: dict[str, tuple[str, Callable[[twofold.Database], twofold.Relation], str | None]] = {}
    try:
        db.create_table("t", {"x": int, "y": int})
        for op in history:
            match op:
                case ("insert", rows):
                    db.get("t").insert(rows)
                case ("delete", rows):
                    db.get("t").delete(rows)
                case ("view", name, how):
                    if name in model:
                        continue
                    base: str | None = None
                    if how in CHAINED:
                        kind = "view" if how == "chain" else "index"
                        bases = sorted(n for n, (k, _, _) in model.items() if k == kind)
                        if not bases:
                            continue
                        base = bases[0]

                        def definition(d: twofold.Database, base: str = base,
                                       how: str = how) -> Any:
                            return CHAINED[how](d.get(base))
                    else:
                        definition = DEFINITIONS[how]
                    db.create_materialized_view(name, definition(db))
                    model[name] = ("view", definition, base)
                case ("index", name, how):
                    if name in model:
                        continue
                    rel = DEFINITIONS[how](db)
                    db.create_index(name, rel, key=rel.columns[0])
                    model[name] = ("index", DEFINITIONS[how], None)
                case ("drop", name):
                    if name not in model:
                        continue
                    db.drop(name, cascade=True)   # also every view chained on it
                    gone = {name}
                    while True:
                        more = {n for n, (_, _, b) in model.items() if b in gone} - gone
                        if not more:
                            break
                        gone |= more
                    for n in gone:
                        del model[n]
                case ("reopen",):
                    db.close()
                    db = _open(path)
            objects = dict(db.objects())
            assert objects == {"t": "table", **{n: ("materialized view" if k == "view"
                                                    else "index")
                                                for n, (k, _, _) in model.items()}}
            for name, (_, definition, _) in model.items():
                got = db.get(name).collect()
                want = definition(db).collect(as_of=got.timestamp)
                assert _multiset(got.rows) == _multiset(want.rows), (name, got.timestamp)
    finally:
        db.close()
