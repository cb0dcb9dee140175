"""`Shard.snapshot_and_listen`: the latest complete time, the collection there and a listener
from there, with `since` unable to pass that time between the reads.

The flake this pins (`tests/api/test_persistence.py::test_the_catalog_survives_on_postgres`,
once in a full run): a table's first checked write read the upper (1, the table being fresh),
then snapshotted and listened at 0; the ticker's round and the controller's hold step landed in
between (PostgreSQL: the step moves the table's since to within `retain_history` of the upper),
so the read was before since and the insert failed with `SinceViolation` (reported as
`InvalidRows`). A thread stalled longer than `retain_history` between the reads fails the same
way on any table. The interleavings are forced here by a hook on the backend's state read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from twofold.protocol import Frontier
from twofold.storage import BeyondUpper, SinceViolation, Storage
from twofold.storage.holds import ControllerHolds

from .helpers import DESC, AfterStateReads, snapshot_counter


def test_since_passing_the_upper_just_read_starts_it_again(storage: Storage) -> None:
    t = storage.create_table("t", DESC)
    t.insert([[1, "a"], [2, "b"]])
    shard = t.shard

    def write_and_compact() -> None:  # another writer, then a compaction up to its write
        ts = storage.table("t").write([[1, "a"], [2, "b"]], [-1, 1])
        shard.downgrade_since(ts)

    ran = AfterStateReads(storage, 2, write_and_compact)
    as_of, snapshot, listener = shard.snapshot_and_listen()
    assert ran.ran == 2  # the first two tries each read an upper that since then passed
    assert as_of == shard.upper.step_back() and shard.since.less_equal(Frontier.at(as_of))
    want = Counter({(2, "b"): 3, (1, "a"): -1})  # both writes, compacted to one time
    assert Counter({(r["k"], r["s"]): r["diff"] for r in snapshot.to_pylist()}) == want
    assert snapshot_counter(shard, as_of) == want
    ts = t.insert([[4, "d"]])
    assert [u for b in listener.poll() for u in b.to_tuples()] == [([4, "d"], ts, 1)]
    listener.close()


def test_since_beyond_every_upper_read_is_a_since_violation(storage: Storage) -> None:
    t = storage.create_table("t", DESC)
    t.insert([[1, "a"]])
    AfterStateReads(storage, 10, lambda: t.shard.downgrade_since(t.shard.upper.time or 0))
    with pytest.raises(SinceViolation, match="before since"):
        t.shard.snapshot_and_listen(attempts=3)


def test_nothing_complete_is_beyond_upper(storage: Storage) -> None:
    shard = storage.create_shard("s", DESC)
    with pytest.raises(BeyondUpper, match="no time is complete"):
        shard.snapshot_and_listen()


def test_the_hold_step_between_the_reads_of_a_fresh_table(servers: Any, tmp_path: Any) -> None:
    """The flake's interleaving with the real actors (PostgreSQL): a fresh table at upper 1,
    then a ticker round and the controller's hold step (window 0: since to the upper's last
    time) after each upper read; the reads start again at the new upper, and the lease the
    listener took holds since there against later steps."""
    from twofold.storage import open_storage

    with open_storage(servers.storage_url("postgres+file", tmp_path)) as storage:
        t = storage.create_table("t", DESC)
        t.advance_to(Frontier.at(1))
        holds = ControllerHolds(storage, dict, window=0)

        def tick_and_step() -> None:
            storage.advance_tables(Frontier.at(storage.oracle.write_ts() + 1))
            holds.step()

        ran = AfterStateReads(storage, 2, tick_and_step)
        as_of, snapshot, listener = t.shard.snapshot_and_listen()
        assert ran.ran == 2 and as_of > 1 and snapshot.num_rows == 0
        ts = t.insert([[1, "a"]])
        tick_and_step()  # would move since past as_of, but the listener's lease holds it
        assert t.shard.since == Frontier.at(as_of)
        assert [u for b in listener.poll() for u in b.to_tuples()] == [([1, "a"], ts, 1)]
        listener.close()
