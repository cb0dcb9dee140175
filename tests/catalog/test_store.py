"""The catalog store (`twofold.catalog`): atomic changes by compare-and-append, ids never
reused, dependents named, races with exactly one winner — on every storage backend."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.catalog import (
    Catalog,
    Change,
    CorruptCatalog,
    Entry,
    EntryExists,
    HasDependents,
    InputRef,
    UnknownEntry,
    differences,
)
from twofold.protocol import ColumnType, Get, GlobalId, RelationDesc
from twofold.storage import Storage, drop_memory_store, open_storage
from twofold.testing.profiles import examples
from twofold.testing.pytest_servers import BACKENDS, Servers

DESC = RelationDesc(names=["x"], types=[ColumnType(scalar="int", nullable=False)])


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    """A fresh storage URL on every backend: the catalog uses the storage interface only."""
    return servers.storage_url(request.param, tmp_path)


@pytest.fixture(params=[b for b in BACKENDS if b != "memory"])
def shared_url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    return servers.storage_url(request.param, tmp_path)


def table(change: Change, name: str) -> Entry:
    entry = Entry(name=name, kind="table", id=change.allocate(), desc=DESC)
    change.add(entry)
    return entry


def view(change: Change, name: str, *reads: Entry) -> Entry:
    entry = Entry(name=name, kind="materialized view", id=change.allocate(), desc=DESC,
                  plan=Get(id=reads[0].id), inputs=[InputRef(r.name, r.id) for r in reads])
    change.add(entry)
    return entry


def create(name: str, *, kind: str = "table") -> object:
    def build(change: Change) -> Entry:
        if name in change.state.entries:
            raise EntryExists(name, change.state.entries[name].kind, [])
        return table(change, name)
    return build


def test_changes_are_durable_and_visible_to_another_handle(url: str) -> None:
    with open_storage(url) as s1, open_storage(url) as s2:
        a, b = Catalog(s1), Catalog(s2)
        t, _ = a.transact(lambda c: table(c, "t"))
        v, _ = a.transact(lambda c: view(c, "v", c.state.entries["t"]))
        state = b.state()
        assert sorted(state.entries) == ["t", "v"]
        assert state.entries["v"] == v and state.entries["t"] == t
        assert [e.name for e in state.in_dependency_order()] == ["t", "v"]
        b.transact(lambda c: c.drop("v", cascade=False))
        assert sorted(a.state().entries) == ["t"]


def test_drop_names_dependents_and_cascades_in_order(url: str) -> None:
    with open_storage(url) as s:
        cat = Catalog(s)
        cat.transact(lambda c: table(c, "t"))
        cat.transact(lambda c: view(c, "v", c.state.entries["t"]))
        cat.transact(lambda c: view(c, "w", c.state.entries["v"], c.state.entries["t"]))
        with pytest.raises(HasDependents) as e:
            cat.transact(lambda c: c.drop("t", cascade=False))
        assert e.value.dependents == ["v", "w"]
        assert sorted(cat.state().entries) == ["t", "v", "w"]   # nothing half-applied
        dropped, state = cat.transact(lambda c: c.drop("v", cascade=True))
        assert dropped == ["w", "v"] and sorted(state.entries) == ["t"]
        with pytest.raises(UnknownEntry, match="'v'"):
            cat.transact(lambda c: c.drop("v", cascade=False))


def test_ids_are_never_reused_across_drops_and_reopens(url: str) -> None:
    seen: list[GlobalId] = []
    for _ in range(3):
        with open_storage(url) as s:
            cat = Catalog(s)
            e, _ = cat.transact(lambda c: table(c, "t"))
            seen.append(e.id)
            cat.transact(lambda c: c.drop("t", cascade=False))
    assert seen == sorted(seen) and len(set(seen)) == 3


def test_racing_creates_of_one_name_exactly_one_wins(shared_url: str) -> None:
    stores = [open_storage(shared_url) for _ in range(4)]
    catalogs = [Catalog(s) for s in stores]
    barrier = threading.Barrier(len(catalogs))
    outcomes: list[str] = []

    def racer(cat: Catalog) -> None:
        barrier.wait()
        try:
            cat.transact(create("same"))  # type: ignore[arg-type]
            outcomes.append("won")
        except EntryExists:
            outcomes.append("lost")

    threads = [threading.Thread(target=racer, args=(c,)) for c in catalogs]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert sorted(outcomes) == ["lost", "lost", "lost", "won"]
    state = catalogs[0].state()
    assert list(state.entries) == ["same"]
    for s in stores:
        s.close()


def test_differences_are_words_not_structs() -> None:
    old = Entry(name="v", kind="index", id=GlobalId.user(1), desc=DESC, key=["x"])
    wider = RelationDesc(names=["x", "y"], types=[ColumnType(scalar="int", nullable=False),
                                                   ColumnType(scalar="str")])
    new = Entry(name="v", kind="index", id=GlobalId.user(2), desc=wider, key=["y"])
    said = differences(old, new)
    assert said == ["its columns are (x int), the new definition's (x int, y str null)",
                    "it is keyed by ['x'], not ['y']"]
    assert differences(old, Entry(name="v", kind="table", id=GlobalId.user(3), desc=DESC)) \
        == ["it is an index, not a table"]
    assert differences(old, old) == []
    assert all("RelationDesc" not in s and "ColumnType" not in s for s in said)


def test_a_corrupt_row_is_a_typed_error(url: str) -> None:
    with open_storage(url) as s:
        cat = Catalog(s)
        shard = s.shard("catalog")
        shard.compare_and_append([(["t", b"\x01garbage"], 0, 1)], 0, 1)
        with pytest.raises(CorruptCatalog, match="'t'"):
            cat.state()


@settings(max_examples=examples(15), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["create", "drop", "reopen"]),
                          st.sampled_from(["a", "b", "c"])), max_size=25))
def test_catalog_equals_a_model_over_random_histories(ops: list[tuple[str, str]]) -> None:
    name = "catalog-prop"
    storage: Storage = open_storage(f"memory://{name}")
    try:
        cat = Catalog(storage)
        model: dict[str, GlobalId] = {}
        ids: list[GlobalId] = []
        for op, n in ops:
            if op == "reopen":
                storage.close()
                storage = open_storage(f"memory://{name}")
                cat = Catalog(storage)
            elif op == "create" and n not in model:
                e, _ = cat.transact(lambda c, n=n: table(c, n))   # type: ignore[misc]
                model[n] = e.id
                ids.append(e.id)
            elif op == "drop" and n in model:
                cat.transact(lambda c, n=n: c.drop(n, cascade=False))   # type: ignore[misc]
                del model[n]
            state = cat.state()
            assert {k: e.id for k, e in state.entries.items()} == model
        assert ids == sorted(ids) and len(set(ids)) == len(ids)
    finally:
        storage.close()
        drop_memory_store(name)
