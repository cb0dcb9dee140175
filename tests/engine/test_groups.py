"""`GroupTable` (key -> dense group id) behaves like a dict that numbers new keys in order.

Checked against a dict model over random scripts of lookups (with duplicate and NULL keys) and
compactions: in exact mode (one Int64 column, codes are values), in hashed mode (an Int64 and a
String column), under forced code collisions (distinct keys sharing a code must get distinct
groups), under forced slot collisions (every probe sequence starts in a handful of slots), and
across table doublings and compactions at larger sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine import groups
from twofold.engine.groups import GroupTable
from twofold.testing.profiles import examples

EXACT: dict[str, pl.DataType] = {"g0": pl.Int64()}
HASHED: dict[str, pl.DataType] = {"g0": pl.Int64(), "g1": pl.String()}
I64 = st.one_of(st.none(), st.integers(-3, 3), st.sampled_from([-(2**63), 2**63 - 1, 2**32]))
STRS = st.sampled_from([None, "a", "b", ""])

Key = tuple[Any, ...]
# A script step: a batch of keys to look up, or a set of keys to drop by compaction.
Step = tuple[str, list[Key]]


def script(keys: st.SearchStrategy[Key]) -> st.SearchStrategy[list[Step]]:
    lookup = st.lists(keys, max_size=15).map(lambda ks: ("ids", ks))
    drop = st.lists(keys, max_size=6).map(lambda ks: ("compact", ks))
    return st.lists(st.one_of(lookup, lookup, drop), min_size=1, max_size=10)


def run_script(sch: dict[str, pl.DataType], steps: list[Step]) -> None:
    table = GroupTable(sch)
    model: dict[Key, int] = {}
    for kind, keys in steps:
        if kind == "ids":
            frame = pl.DataFrame([list(k) for k in keys], schema=sch, orient="row")
            ids = table.ids(frame).tolist() if keys else []
            before = len(model)
            for key, i in zip(keys, ids, strict=True):
                if key in model:
                    assert model[key] == i, key
                else:
                    assert i >= before, "a new key got an id already given out"
                    model[key] = i
            assert sorted(model.values()) == list(range(len(model))), "ids are not dense"
            assert len(table) == len(model)
        else:
            keep = np.ones(len(table), dtype=bool)
            for key in keys:
                if key in model:
                    keep[model[key]] = False
            kept = table.compact(keep).tolist()
            survivors = sorted((i, k) for k, i in model.items() if keep[i])
            assert kept == [i for i, _ in survivors]
            model = {k: new for new, (_, k) in enumerate(survivors)}
            assert len(table) == len(model)
    if model:
        # Every key held still maps to its id (looked up all at once, in reverse order).
        keys = list(model)[::-1]
        frame = pl.DataFrame([list(k) for k in keys], schema=sch, orient="row")
        assert table.ids(frame).tolist() == [model[k] for k in keys]
        assert len(table) == len(model)


@settings(max_examples=examples(50), deadline=None)
@given(script(st.tuples(I64)))
def test_exact_table_matches_a_dict(steps: list[Step]) -> None:
    run_script(EXACT, steps)


@settings(max_examples=examples(50), deadline=None)
@given(script(st.tuples(I64, STRS)))
def test_hashed_table_matches_a_dict(steps: list[Step]) -> None:
    run_script(HASHED, steps)


@pytest.fixture
def code_collisions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Codes of 2 bits: distinct keys share codes all the time."""
    orig = GroupTable.key_codes

    def two_bits(self: GroupTable, keys: pl.DataFrame) -> np.ndarray:
        out: np.ndarray = orig(self, keys) & np.uint64(3)
        return out

    monkeypatch.setattr(GroupTable, "key_codes", two_bits)
    yield


@pytest.fixture
def slot_collisions(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every probe sequence starts in one of 4 slots near the end of the table (so probes
    wrap around)."""
    monkeypatch.setattr(groups, "mix", lambda x: (x & np.uint64(3)) + np.uint64(1020))
    yield


@pytest.mark.usefixtures("code_collisions")
@settings(max_examples=examples(30), deadline=None)
@given(script(st.tuples(I64, STRS)))
def test_hashed_table_is_exact_under_code_collisions(steps: list[Step]) -> None:
    run_script(HASHED, steps)


@pytest.mark.usefixtures("slot_collisions")
@settings(max_examples=examples(30), deadline=None)
@given(script(st.tuples(I64)))
def test_exact_table_under_slot_collisions(steps: list[Step]) -> None:
    run_script(EXACT, steps)


@pytest.mark.usefixtures("slot_collisions", "code_collisions")
@settings(max_examples=examples(30), deadline=None)
@given(script(st.tuples(I64, STRS)))
def test_hashed_table_under_slot_and_code_collisions(steps: list[Step]) -> None:
    run_script(HASHED, steps)


@pytest.mark.parametrize("sch", [EXACT, HASHED], ids=["exact", "hashed"])
def test_doubling_and_compaction_at_size(sch: dict[str, pl.DataType]) -> None:
    rng = np.random.default_rng(11)
    table = GroupTable(sch)
    model: dict[Key, int] = {}
    for _ in range(4):
        ks = rng.integers(-50_000, 50_000, 8_000)
        if len(sch) == 1:
            frame = pl.DataFrame({"g0": ks})
            keys: list[Key] = [(int(k),) for k in ks]
        else:
            frame = pl.DataFrame({"g0": ks % 97, "g1": (ks // 97).astype(str)})
            keys = [(int(k % 97), str(k // 97)) for k in ks]
        ids = table.ids(frame).tolist()
        for key, i in zip(keys, ids, strict=True):
            assert model.setdefault(key, i) == i
        assert len(table) == len(model)
        keep = rng.random(len(table)) < 0.6
        kept = table.compact(keep)
        assert kept.tolist() == np.flatnonzero(keep).tolist()
        renumber = {int(old): new for new, old in enumerate(kept)}
        model = {k: renumber[i] for k, i in model.items() if i in renumber}
    assert len(table.slot_id) >= 2 * len(table)
    assert int((table.slot_id >= 0).sum()) == len(table) == table.used
