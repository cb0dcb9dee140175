"""`TableState`, the key index under checked writes: it follows its shard incrementally, and
compacts its garbage without changing what it answers."""

from __future__ import annotations

from collections import Counter

import numpy as np
import polars as pl

from twofold.api.tablestate import TableState
from twofold.api.writes import TableWriter
from twofold.protocol import ColumnType, RelationDesc
from twofold.storage import open_storage, to_tuples

DESC = RelationDesc(["id", "v"], [ColumnType("int", False), ColumnType("str", True)])


def frame(ids: np.ndarray, tag: str) -> pl.DataFrame:
    return pl.DataFrame({"id": ids, "v": [f"{tag}{i}" for i in ids]})


def test_state_follows_writes_from_another_handle() -> None:
    with open_storage("memory://") as storage:
        t = storage.create_table("t", DESC)
        t.insert([[1, "a"], [2, None]])
        state = TableState(t, ("id",))
        state.sync()
        other = storage.table("t")
        other.write([[1, "a"], [3, "c"]], [-1, 1])
        upper = state.sync()
        assert upper == t.upper
        ids, rows = state.live()
        assert Counter(rows.rows()) == Counter({(2, None): 1, (3, "c"): 1})
        assert state.counts[ids].tolist() == [1, 1]


def test_compaction_keeps_the_contents() -> None:
    with open_storage("memory://") as storage:
        t = storage.create_table("t", DESC)
        writer = TableWriter(t, "t", ("id",))
        ids = np.arange(500, dtype=np.int64)
        writer.insert(frame(ids, "x"))
        for round_ in range(30):
            # Each upsert appends 500 stored rows, each absent-key delete 500 dead ids.
            assert writer.upsert(frame(ids, f"r{round_}-")).replaced == 500
            absent = np.arange(10_000 + 500 * round_, 10_500 + 500 * round_, dtype=np.int64)
            assert writer.delete_keys(pl.DataFrame({"id": absent})).count == 0
        state = writer.state()
        assert len(state.rows) < 30 * 500  # garbage was dropped along the way
        _, rows = state.live()
        want = Counter((int(i), f"r29-{i}") for i in ids)
        assert Counter(rows.rows()) == want
        assert Counter({tuple(r): d for r, _, d in to_tuples(t.snapshot())}) == want
        assert writer.delete_keys(pl.DataFrame({"id": [0, 1]})).count == 2


def test_a_plan_survives_ticks_but_not_writes() -> None:
    from twofold.api.writes import Delta
    from twofold.protocol import Frontier

    with open_storage("memory://") as storage:
        t = storage.create_table("t", DESC)
        t.insert([[1, "a"]])
        writer = TableWriter(t, "t", None)
        calls: list[int] = []

        def plan_with(interference):  # type: ignore[no-untyped-def]
            def plan(state: TableState) -> tuple[Delta, None]:
                calls.append(1)
                if len(calls) == 1:
                    interference()
                ids, _ = state.live()
                return Delta(ids, state.counts[ids]), None
            return plan

        # The upper moves by an empty append (a tick) while planning: the plan still holds.
        def tick() -> None:
            t.advance_to(Frontier.at(t.upper.time + 5))  # type: ignore[operator]

        writer.transact("delete", plan_with(tick))
        assert len(calls) == 1
        assert Counter({tuple(r): d for r, _, d in to_tuples(t.snapshot())}) == Counter()
        # Another writer appends rows while planning: the plan is made again, and sees them.
        t.insert([[2, "b"]])
        calls.clear()
        writer.transact("delete", plan_with(lambda: storage.table("t").insert([[3, "c"]])))
        assert len(calls) == 2
        assert Counter({tuple(r): d for r, _, d in to_tuples(t.snapshot())}) == Counter()


def test_state_reloads_when_compaction_passes_it() -> None:
    with open_storage("memory://") as storage:
        t = storage.create_table("t", DESC)
        t.insert([[1, "a"], [2, "b"]])
        writer = TableWriter(t, "t", ("id",))
        assert writer.delete_keys(pl.DataFrame({"id": [1]})).count == 1
        # Another handle writes, then the shard is compacted past what the state has seen:
        # following it incrementally is no longer possible, so it starts again from a snapshot.
        storage.table("t").write([[3, "c"], [2, "b"]], [1, -1])
        latest = t.upper.time
        assert latest is not None
        t.shard.downgrade_since(latest - 1)
        state = writer.state()
        loads: list[int] = []
        load = state._load

        def counted() -> None:
            loads.append(1)
            load()

        state._load = counted  # type: ignore[method-assign]
        assert writer.delete_keys(pl.DataFrame({"id": [2, 3]})).count == 1
        assert loads == [1]
        assert Counter({tuple(r): d for r, _, d in to_tuples(t.snapshot())}) == Counter()
