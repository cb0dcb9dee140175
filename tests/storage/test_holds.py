"""The controller as a critical reader (`twofold.storage.holds`): since follows what the
controller still needs, on backends whose readers drive it, and reads at held times keep
working; elsewhere since is left alone."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import twofold
from twofold.api.errors import ReadBeforeSince
from twofold.controller.storage_holds import storage_holds
from twofold.protocol import Frontier
from twofold.storage import Storage, open_storage
from twofold.storage.holds import ControllerHolds, hold_target
from twofold.testing.profiles import examples
from twofold.testing.pytest_servers import Servers

from .helpers import DESC, snapshot_counter

frontiers = st.one_of(st.just(Frontier.empty()), st.integers(0, 1000).map(Frontier.at))


@settings(max_examples=examples(200), deadline=None)
@given(upper=frontiers, need=st.one_of(st.none(), frontiers), window=st.integers(0, 300))
def test_hold_target_never_passes_a_need_or_the_window(upper: Frontier, need: Frontier | None,
                                                       window: int) -> None:
    target = hold_target(upper, need, window)
    last = upper.step_back()
    if last is None:
        assert target is None  # nothing complete: nothing to release
        return
    assert target is not None and target.time is not None
    assert target.time <= max(0, last - window)  # the read window behind the upper stays
    if need is not None:
        assert target.less_equal(need)  # what a replay would read stays
    # and it is the latest such time: holding earlier would keep history for nothing
    expected = Frontier.at(max(0, last - window))
    assert target == (expected if need is None else expected.meet(need))


def table_with_history(storage: Storage, n: int) -> None:
    table = storage.create_table("t", DESC)
    for t in range(n):
        table.shard.compare_and_append([([t % 3, f"v{t}"], t, 1)], t, t + 1)


def test_holds_move_since_where_readers_drive_it_and_nowhere_else(storage: Storage) -> None:
    # Every backend: the hold follows the window and the needs on PostgreSQL; memory and
    # SQLite (whose listeners hold no leases) keep their since until an explicit downgrade.
    table_with_history(storage, 20)
    shard = storage.table("t").shard
    needs: dict[str, Frontier] = {}
    holds = ControllerHolds(storage, lambda: needs, window=5)
    moved = holds.step()
    if not holds.enabled:
        assert moved == {} and shard.since == Frontier.minimum()
        return
    assert shard.since == Frontier.at(14)  # last complete time 19, minus the window
    table = storage.table("t")
    table.shard.compare_and_append([([9, "late"], 20, 1)], 20, 40)
    needs[shard.shard_id] = Frontier.at(17)  # a dataflow's replay reads from 17
    holds.step()
    assert shard.since == Frontier.at(17)
    expected = Counter({(t % 3, f"v{t}"): 1 for t in range(18)})
    assert snapshot_counter(shard, 17) == expected  # held times read exactly, compacted
    needs.clear()
    holds.step()
    assert shard.since == Frontier.at(34)


def test_a_newer_controller_fences_the_older_one(servers: Servers, tmp_path: Path) -> None:
    url = servers.storage_url("postgres+file", tmp_path)
    with open_storage(url) as storage:
        table_with_history(storage, 30)
        shard = storage.table("t").shard
        old_needs = {shard.shard_id: Frontier.at(5)}
        old = ControllerHolds(storage, lambda: old_needs, window=0)
        old.step()
        assert shard.since == Frontier.at(5)
        new = ControllerHolds(storage, lambda: {shard.shard_id: Frontier.at(10)}, window=0)
        new.step()  # takes the hold over
        assert shard.since == Frontier.at(10)
        old_needs[shard.shard_id] = Frontier.at(20)
        assert old.step() == {} and old.fenced  # its move names a stale token: refused
        assert shard.since == Frontier.at(10)


def test_the_controller_holds_tables_at_what_its_dataflows_need(
    servers: Servers, tmp_path: Path
) -> None:
    url = servers.storage_url("postgres+file", tmp_path)
    with twofold.open(url, runtimes="one", tick_interval=0.02, retain_history=0.2,
                      timeout=60) as db:
        events = db.create_table("events", {"k": int, "v": int})
        index = db.create_index("by_k", events, key="k")
        written: list[tuple[int, int, int]] = []  # (timestamp, k, v)
        for i in range(30):
            ts = events.insert([[i % 4, i]]).timestamp
            written.append((ts, i % 4, i))
            time.sleep(0.01)
        assert db.core.storage is not None
        shard = db.core.storage.table("events").shard
        deadline = time.monotonic() + 60
        while shard.since.time in (None, 0) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert shard.since.time not in (None, 0), "nothing ever advanced the table's since"
        assert db.controller is not None
        ticker = db.core.ticker
        assert ticker is not None
        holds = ticker.holds
        assert holds is not None
        ticker.holds = None  # freeze since from here on, so the reads below cannot race it
        assert ticker.wait_for_ticks(ticker.ticks + 2, timeout=30)
        # Where the controller holds the shard: its own reader's since. The shard's since may
        # be lower while the dataflow's listener (under a lease) lags behind it, as it does on
        # a loaded machine, but reads before the controller's reader are refused all the same.
        with holds.hold([shard.shard_id]) as held:
            since = held.since[shard.shard_id].time
        assert since is not None
        assert shard.since.less_equal(Frontier.at(since))
        need = storage_holds(db.controller.state).get(shard.shard_id)
        assert need is not None and shard.since.less_equal(need)  # never past the dataflow
        # Reads at held times (since and later) keep working and stay exact.
        upper = shard.upper.time
        assert upper is not None
        for ts in sorted({since, (since + upper) // 2, upper - 1}):
            expected = sorted((k, v) for t, k, v in written if t <= ts)
            assert sorted(events.collect(as_of=ts).rows) == expected
        assert sorted(index.collect().rows) == sorted((k, v) for _, k, v in written)
        with pytest.raises(ReadBeforeSince):
            events.collect(as_of=since - 1)


def test_a_hold_keeps_since_where_it_was_taken_until_a_step_after_its_release(
        servers: Servers, tmp_path: Path) -> None:
    # The race a new dataflow runs (`ControllerHolds.hold`): its as_of is chosen from the
    # since while a step may have read the needs before the dataflow was in them.
    with open_storage(servers.storage_url("postgres+file", tmp_path)) as storage:
        table_with_history(storage, 20)
        shard = storage.table("t").shard
        needs: dict[str, Frontier] = {}
        holds = ControllerHolds(storage, lambda: dict(needs), window=0)
        hold = holds.hold([shard.shard_id])
        assert hold.since == {shard.shard_id: Frontier.minimum()}
        holds.step()
        assert shard.since == Frontier.minimum()  # without the hold: 19

        def stale_needs() -> dict[str, Frontier]:
            # This step read the needs before the dataflow was created; meanwhile it was, at
            # 10, and its hold released.
            read = dict(needs)
            needs[shard.shard_id] = Frontier.at(10)
            hold.release()
            return read

        holds.needs = stale_needs
        holds.step()
        assert shard.since == Frontier.minimum()  # the released hold still counted
        holds.needs = lambda: dict(needs)
        holds.step()
        assert shard.since == Frontier.at(10)  # now the needs have the dataflow


def test_a_hold_taken_while_a_step_runs_is_seen_before_the_move(
        servers: Servers, tmp_path: Path) -> None:
    with open_storage(servers.storage_url("postgres+file", tmp_path)) as storage:
        table_with_history(storage, 20)
        shard = storage.table("t").shard
        holds = ControllerHolds(storage, dict, window=0)
        holds.step()
        assert shard.since == Frontier.at(19)
        table = storage.table("t")
        table.shard.compare_and_append([([9, "late"], 20, 1)], 20, 40)
        taken = []

        def needs_then_hold() -> dict[str, Frontier]:
            taken.append(holds.hold([shard.shard_id]))  # the event loop, between the two
            return {}

        holds.needs = needs_then_hold
        holds.step()
        assert taken[0].since == {shard.shard_id: Frontier.at(19)}
        assert shard.since == Frontier.at(19)  # not 39: the hold was taken before the move
        taken[0].release()
        holds.needs = dict
        holds.step()
        holds.step()
        assert shard.since == Frontier.at(39)


def test_a_hold_reports_the_since_on_every_backend(storage: Storage) -> None:
    table_with_history(storage, 5)
    shard = storage.table("t").shard
    shard.downgrade_since(3)
    holds = ControllerHolds(storage, dict, window=0)
    with holds.hold([shard.shard_id]) as hold:
        assert hold.since == {shard.shard_id: Frontier.at(3)}
        holds.step()
        assert shard.since == Frontier.at(3)
    assert hold.released
