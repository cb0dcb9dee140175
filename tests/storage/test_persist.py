"""What makes the PostgreSQL + blob backend safe on many machines (`spec/storage.md`, "Beyond
one machine"): idempotent retries of indeterminate CASes (faults injected, and the server
crashed mid-append), garbage collection of replaced and leaked parts and of old versions,
leased and critical readers holding since back, the shared timestamp oracle, batched upper
advances, and listeners woken by LISTEN/NOTIFY from another process."""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from twofold.protocol import Frontier
from twofold.storage import (
    InvalidStorageUrl,
    SinceViolation,
    Storage,
    StorageError,
    UpperMismatch,
    open_storage,
    to_tuples,
)
from twofold.storage.persist import CriticalReader, LeasedReader, PersistBackend
from twofold.storage.persist import state as S
from twofold.testing.pytest_servers import Servers

from .helpers import (
    BIG,
    DESC,
    append_with_retry,
    reference_at,
    snapshot_counter,
    tagged_batch,
    whole_batches,
)

SPAWN = multiprocessing.get_context("spawn")
PG_BACKENDS = ("postgres+file", "postgres+s3")


@pytest.fixture(params=PG_BACKENDS)
def pg_url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    return servers.storage_url(request.param, tmp_path)


@pytest.fixture
def pg(pg_url: str) -> Iterator[Storage]:
    with open_storage(pg_url) as st:
        yield st


def persist(storage: Storage) -> PersistBackend:
    assert isinstance(storage.backend, PersistBackend)
    return storage.backend


def blob_keys(storage: Storage) -> set[str]:
    return {k for k, _ in persist(storage).blobs.list()}


def referenced_keys(storage: Storage, shard_id: str) -> set[str]:
    from twofold.storage.persist.state import keys_of

    return keys_of(persist(storage)._head(shard_id).data)


# -- URLs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "needle"), [
    ("postgres://u@h:5432/db", "needs a blob store"),
    ("postgres://u@h:5432/db?blob=ftp://x/y", "scheme must be 'file'"),
    ("postgres://u@h:5432/db?blob=file://relative/dir", "file:///absolute"),
    ("postgres://u@h:5432/db?blob=s3:///prefix", "s3://bucket"),
    ("postgres:///?blob=file:///tmp/x", "postgres://user@host:port/database"),
])
def test_bad_postgres_urls(url: str, needle: str) -> None:
    with pytest.raises(InvalidStorageUrl, match=needle):
        open_storage(url)


def test_bad_schema_name(servers: Servers, tmp_path: Path) -> None:
    with pytest.raises(InvalidStorageUrl, match="schema"):
        open_storage(f"{servers.pg().url}?schema=Bad-Name&blob=file://{tmp_path}")


def test_unreachable_server_is_a_clear_error(tmp_path: Path) -> None:
    from twofold.testing.pgcluster import free_port

    url = f"postgres://u@127.0.0.1:{free_port()}/db?blob=file://{tmp_path}"
    with pytest.raises(StorageError, match="cannot connect to PostgreSQL"):
        open_storage(url)


# -- idempotent retries ----------------------------------------------------------------------


def fail_once(point: str) -> Any:
    """A fault hook raising a lost-connection error the first time `point` is reached."""
    fired: list[str] = []

    def hook(where: str) -> None:
        if where == point and not fired:
            fired.append(where)
            raise psycopg.OperationalError(f"simulated connection loss at {where}")

    return hook, fired


@pytest.mark.parametrize("point", ["before_cas", "after_cas"])
def test_indeterminate_cas_is_resolved_by_its_token(pg: Storage, point: str) -> None:
    # after_cas: the insert committed but the answer was lost; before_cas: nothing was sent.
    # Either way the append lands exactly once and the caller sees success.
    shard = pg.create_shard("s", BIG)
    hook, fired = fail_once(point)
    persist(pg).consensus.fault = hook
    shard.compare_and_append(tagged_batch(0, 0, 5, 0), 0, 1)
    assert fired == [point]
    shard.compare_and_append(tagged_batch(0, 1, 5, 1), 1, 2)  # the next append is normal
    assert whole_batches(shard, 5) == {(0, 0), (0, 1)}
    assert persist(pg)._head("s").seqno == 3  # created, then exactly two versions


def test_indeterminate_mismatch_is_still_a_mismatch(pg: Storage) -> None:
    # Another writer wins while our connection is "lost": the retry must not claim success.
    shard = pg.create_shard("s", BIG)
    other = open_storage(pg.url)
    try:
        def hook(where: str) -> None:
            if where == "before_cas" and hook.armed:  # type: ignore[attr-defined]
                hook.armed = False  # type: ignore[attr-defined]
                other.shard("s").compare_and_append(tagged_batch(1, 0, 5, 0), 0, 1)
                raise psycopg.OperationalError("simulated connection loss")

        hook.armed = True  # type: ignore[attr-defined]
        persist(pg).consensus.fault = hook
        with pytest.raises(StorageError, match="expected upper"):
            shard.compare_and_append(tagged_batch(0, 0, 5, 0), 0, 1)
        assert whole_batches(shard, 5) == {(1, 0)}
    finally:
        other.close()


def process_append_loop(url: str, shard_id: str, count: int, size: int, progress: Any,
                        done: Any) -> None:
    """Child process: append `count` tagged batches, reporting progress; survives server
    restarts through the backend's retries."""
    with open_storage(url) as storage:
        shard = storage.shard(shard_id)
        for seq in range(count):
            append_with_retry(shard, 0, seq, size)
            progress.value = seq + 1
        done.set()


def test_server_crash_mid_append_loop_writes_nothing_twice(servers: Servers,
                                                            tmp_path: Path) -> None:
    # A writer appends in a loop while PostgreSQL is crashed (immediate stop: no checkpoint,
    # connections cut mid-statement) and restarted, twice. Every batch lands exactly once.
    url = servers.storage_url("postgres+file", tmp_path)
    count, size = 150, 50
    with open_storage(url) as storage:
        storage.create_shard("k", BIG)
    progress, done = SPAWN.Value("i", 0), SPAWN.Event()
    proc = SPAWN.Process(target=process_append_loop,
                         args=(url, "k", count, size, progress, done))
    proc.start()
    try:
        for threshold in (20, 70):
            deadline = time.monotonic() + 60
            while progress.value < threshold and time.monotonic() < deadline:
                time.sleep(0.005)
            assert progress.value >= threshold
            servers.pg().restart_after_crash(down_for=0.3)
        assert done.wait(timeout=120)
        proc.join(timeout=30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
    with open_storage(url) as storage:
        shard = storage.shard("k")
        assert whole_batches(shard, size) == {(0, s) for s in range(count)}
        assert shard.upper == Frontier.at(count)


# -- garbage collection ----------------------------------------------------------------------


def big_batch(seq: int, time_: int) -> list[Any]:
    return tagged_batch(0, seq, 400, time_)  # well over the inline limit: a blob part


def test_small_parts_are_inlined_and_large_parts_are_blobs(pg: Storage) -> None:
    shard = pg.create_shard("s", BIG)
    shard.compare_and_append(tagged_batch(0, 0, 2, 0), 0, 1)
    assert blob_keys(pg) == set()
    shard.compare_and_append(big_batch(1, 1), 1, 2)
    assert len(blob_keys(pg)) == 1 == len(referenced_keys(pg, "s"))


def inline_rows(storage: Storage, shard_id: str) -> set[str]:
    backend = persist(storage)
    return set(backend.consensus.run("parts", lambda c: [r[0] for r in c.execute(
        f"SELECT key FROM {backend.schema}.parts WHERE shard = %s", (shard_id,)).fetchall()]))


def test_inlined_bytes_live_beside_the_state_not_in_it(pg: Storage) -> None:
    # A compare-and-set writes the state (part metadata, a few dozen bytes a part) and the new
    # part's row, not a copy of every inlined part: the state stays small as parts collect.
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    for t in range(10):
        shard.compare_and_append([([t, "v" * 200], t, 1)], t, t + 1)
    data = backend._head("s").data
    assert all(p.inline is not None and p.size > 200 for p in data.parts)
    assert inline_rows(pg, "s") == S.inline_keys_of(data)
    assert len(S.encode_state(data)) < 60 * len(data.parts) < S.inline_bytes(data)
    # A fresh handle (no cached bytes) reads them from the table.
    with open_storage(pg.url) as other:
        assert snapshot_counter(other.shard("s"), 9) == Counter(
            {(t, "v" * 200): 1 for t in range(10)})


def test_a_lost_compare_and_set_inserts_no_inlined_part(pg_url: str) -> None:
    with open_storage(pg_url) as a, open_storage(pg_url) as b:
        a.create_shard("s", DESC).compare_and_append([([0, "a"], 0, 1)], 0, 1)
        b.shard("s").compare_and_append([([1, "b"], 1, 1)], 1, 2)  # a's cached head is stale
        before = inline_rows(a, "s")
        with pytest.raises(UpperMismatch):
            a.shard("s").compare_and_append([([2, "c"], 1, 1)], 1, 2)  # CASes, loses
        assert inline_rows(a, "s") == before == S.inline_keys_of(persist(a)._head("s").data)


def test_truncation_deletes_the_rows_of_replaced_inlined_parts(pg: Storage) -> None:
    backend = persist(pg)
    backend.keep_versions, backend.keep_seconds = 0, 0.0
    shard = pg.create_shard("s", DESC)
    for t in range(6):
        shard.compare_and_append([([t % 2, "x"], t, 1)], t, t + 1)
    assert len(inline_rows(pg, "s")) == 6
    shard.downgrade_since(5)  # compacts the five parts behind since into one (inlined too)
    backend.truncate("s")
    assert inline_rows(pg, "s") == S.inline_keys_of(backend._head("s").data)
    assert len(inline_rows(pg, "s")) == 2
    assert snapshot_counter(shard, 5) == Counter({(0, "x"): 3, (1, "x"): 3})


def test_many_small_appends_fold_inlined_parts_and_spill_them_into_blobs(pg: Storage) -> None:
    # since never moves, so nothing compacts: the state must stay small anyway, and every read
    # must be exactly what was appended.
    shard = pg.create_shard("s", DESC)
    updates: list[Any] = []
    for t in range(120):
        batch = [([t % 5, f"row-{t}-{i}-" + "x" * 60], t, 1 if i else -1) for i in range(4)]
        shard.compare_and_append(batch, t, t + 1)
        updates += batch
        if t == 40:  # folds so far: inlined parts, not one per append
            parts = persist(pg)._head("s").data.parts
            assert all(p.inline is not None for p in parts) and len(parts) <= 16
            assert max(p.count for p in parts) > 4
        # A writer's cache of its inlined parts holds only parts the head references: it does
        # not grow with every append the shard ever took.
        live = S.inline_keys_of(persist(pg)._heads["s"].data)
        assert set(persist(pg)._inline.get("s", {})) <= live
    data = persist(pg)._head("s").data
    assert S.inline_bytes(data) <= 64 * 1024 and 1 <= len(blob_keys(pg)) < 20
    assert len(data.parts) <= 24
    assert sum(p.count for p in data.parts) == len(updates)
    for t in (0, 17, 63, 64, 119):
        assert snapshot_counter(shard, t) == reference_at(updates, t)
    listened = [u for b in shard.listen(10).poll() for u in b.to_tuples()]
    assert Counter((tuple(r), t, d) for r, t, d in listened) == Counter(
        (tuple(r), t, d) for r, t, d in updates if t > 10)


def test_blob_parts_of_a_shard_that_never_compacts_stay_logarithmic(pg: Storage) -> None:
    shard = pg.create_shard("s", BIG)
    updates: list[Any] = []
    for t in range(64):
        batch = tagged_batch(t % 3, t, 150, t)  # each part a blob (over the inline limit)
        shard.compare_and_append(batch, t, t + 1)
        updates += batch
    parts = persist(pg)._head("s").data.parts
    assert all(p.key is not None for p in parts)
    assert len(parts) <= 12, [p.count for p in parts]  # not 64
    assert sum(p.count for p in parts) == len(updates)
    for t in (0, 31, 63):
        assert snapshot_counter(shard, t) == reference_at(updates, t)
    listened = [u for b in shard.listen(20).poll() for u in b.to_tuples()]
    assert sorted(map(repr, listened)) == sorted(repr(u) for u in updates if u[1] > 20)


def test_compaction_then_truncation_deletes_replaced_blobs(pg: Storage) -> None:
    backend = persist(pg)
    backend.keep_versions, backend.keep_seconds = 0, 0.0
    backend.merge_below = 0  # only compaction replaces parts here
    shard = pg.create_shard("s", BIG)
    expected: Counter[Any] = Counter()
    for t in range(8):
        rows = big_batch(t, t)
        shard.compare_and_append(rows, t, t + 1)
        expected.update(tuple(r) for r, _, _ in rows)
    assert len(blob_keys(pg)) == 8
    shard.downgrade_since(7)  # compacts: parts behind since merge into one
    backend.truncate("s")
    assert blob_keys(pg) == referenced_keys(pg, "s")
    assert len(blob_keys(pg)) < 8
    assert snapshot_counter(shard, 7) == expected
    versions = backend.consensus.run("count", lambda c: c.execute(
        f"SELECT count(*) FROM {backend.schema}.consensus WHERE shard = 's'").fetchone())
    assert versions is not None and versions[0] <= 2


def process_die_between_put_and_cas(url: str, shard_id: str) -> None:
    """Child process: PUT a part's blob, then die (SIGKILL-like) before its CAS."""
    with open_storage(url) as storage:
        backend = storage.backend
        assert isinstance(backend, PersistBackend)

        def die(where: str) -> None:
            if where == "before_commit":
                os._exit(17)

        backend.fault = die
        shard = storage.shard(shard_id)
        shard.compare_and_append(big_batch(9, 1), 1, 2)


def test_parts_leaked_by_a_killed_writer_are_collected(pg: Storage) -> None:
    shard = pg.create_shard("s", BIG)
    shard.compare_and_append(big_batch(0, 0), 0, 1)
    proc = SPAWN.Process(target=process_die_between_put_and_cas, args=(pg.url, "s"))
    proc.start()
    proc.join(timeout=60)
    assert proc.exitcode == 17
    assert shard.upper == Frontier.at(1)  # the dead writer's append did not land
    leaked = blob_keys(pg) - referenced_keys(pg, "s")
    assert len(leaked) == 1
    backend = persist(pg)
    assert backend.collect_garbage(grace_seconds=3600)["leaked"] == 0  # too young to judge
    assert backend.collect_garbage(grace_seconds=0)["leaked"] == 1
    assert blob_keys(pg) == referenced_keys(pg, "s")
    assert len(snapshot_counter(shard, 0)) == 400


def test_gc_command_line(pg: Storage, capsys: pytest.CaptureFixture[str]) -> None:
    from twofold.storage.persist.__main__ import main

    pg.create_shard("s", BIG).compare_and_append(big_batch(0, 0), 0, 1)
    assert main(["gc", pg.url, "--grace", "0"]) == 0
    assert '"leaked": 0' in capsys.readouterr().out
    assert main(["gc", "sqlite:///tmp/not-postgres.db"]) == 2
    assert "not a postgres://" in capsys.readouterr().err


def test_ticks_do_not_accumulate_versions(pg: Storage) -> None:
    backend = persist(pg)
    backend.keep_versions, backend.keep_seconds = 4, 0.0
    table = pg.create_table("t", DESC)
    for i in range(200):
        pg.advance_tables(Frontier.at(10 + i))
    assert table.upper == Frontier.at(209)
    rows = backend.consensus.run("count", lambda c: c.execute(
        f"SELECT count(*) FROM {backend.schema}.consensus").fetchone())
    assert rows is not None and rows[0] < 80


# -- readers ---------------------------------------------------------------------------------


def test_leased_reader_holds_since_until_its_lease_runs_out(pg: Storage) -> None:
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 20)
    assert backend.register_reader("s", "r1", since=Frontier.at(3),
                                   lease_seconds=0.5) == Frontier.at(3)
    assert shard.downgrade_since(10) == Frontier.at(3)  # held back by the reader
    assert snapshot_counter(shard, 3) == Counter({(1, "a"): 1})
    assert backend.heartbeat_readers("s", ["r1"]) == []
    time.sleep(0.7)  # no heartbeat: the lease runs out, and anyone may expire it
    assert backend.heartbeat_readers("s", ["r1"]) == ["r1"]
    assert shard.downgrade_since(10) == Frontier.at(10)
    with pytest.raises(SinceViolation):
        shard.snapshot(5)


def test_reader_downgrades_move_since_to_the_meet(pg: Storage) -> None:
    # With a critical reader (the controller) registered, since follows the meet of all.
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 50)
    backend.register_reader("s", "c", since=Frontier.at(0), lease_seconds=None, token="t")
    backend.register_reader("s", "a", since=Frontier.at(0), lease_seconds=60)
    backend.register_reader("s", "b", since=Frontier.at(0), lease_seconds=60)
    assert backend.downgrade_reader("s", "c", Frontier.at(40), expected_token="t") == \
        Frontier.at(0)
    assert backend.downgrade_reader("s", "a", Frontier.at(20)) == Frontier.at(0)
    assert backend.downgrade_reader("s", "b", Frontier.at(30)) == Frontier.at(20)
    backend.expire_reader("s", "a")
    assert backend.downgrade_reader("s", "b", Frontier.at(30)) == Frontier.at(30)
    # A heartbeat carries a leased reader's progress.
    assert backend.heartbeat_readers("s", {"b": Frontier.at(35)}) == []
    assert shard.since == Frontier.at(35)


def test_leased_readers_alone_only_hold_since_back(pg: Storage) -> None:
    # A listener's progress must not release history the owner of the shard still needs:
    # without a critical reader, since moves only by downgrade_since, capped by the leases.
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 50)
    backend.register_reader("s", "a", since=Frontier.at(10), lease_seconds=60)
    backend.heartbeat_readers("s", {"a": Frontier.at(30)})
    assert shard.since == Frontier.minimum()
    assert shard.downgrade_since(40) == Frontier.at(30)


def test_critical_reader_is_fenced_by_its_token(pg: Storage) -> None:
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 50)
    backend.register_reader("s", "controller", since=Frontier.at(5), lease_seconds=None,
                            token="epoch-1")
    time.sleep(0.05)  # critical readers have no lease to run out
    assert shard.downgrade_since(40) == Frontier.at(5)
    moved = backend.downgrade_reader("s", "controller", Frontier.at(10),
                                     expected_token="epoch-1", new_token="epoch-2")
    assert moved == Frontier.at(10)
    with pytest.raises(StorageError, match="fenced"):
        backend.downgrade_reader("s", "controller", Frontier.at(30), expected_token="epoch-1")
    assert shard.since == Frontier.at(10)


def process_leased_reader(url: str, shard_id: str, ready: Any) -> None:
    """Child process: hold since at 5 under a short lease, heartbeating, until killed."""
    with open_storage(url) as storage:
        backend = storage.backend
        assert isinstance(backend, PersistBackend)
        LeasedReader(backend, shard_id, Frontier.at(5), lease_seconds=0.6)
        ready.set()
        time.sleep(3600)


def test_a_leased_reader_holds_while_it_heartbeats_and_expires_when_its_process_dies(
    pg: Storage,
) -> None:
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 50)
    ready = SPAWN.Event()
    proc = SPAWN.Process(target=process_leased_reader, args=(pg.url, "s", ready))
    proc.start()
    try:
        assert ready.wait(timeout=60)
        time.sleep(1.5)  # 2.5 leases: only its heartbeats keep it
        assert shard.downgrade_since(40) == Frontier.at(5)
    finally:
        proc.kill()
        proc.join(timeout=30)
    time.sleep(0.8)  # no heartbeats now: the lease runs out
    assert shard.downgrade_since(40) == Frontier.at(40)


def test_reader_handles_release_and_fence(pg: Storage) -> None:
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 50)
    with LeasedReader(backend, "s", Frontier.at(3), lease_seconds=30) as reader:
        assert shard.downgrade_since(20) == Frontier.at(3)
        assert reader.downgrade_since(Frontier.at(10)) == Frontier.at(3)  # only releases
        assert shard.downgrade_since(20) == Frontier.at(10)
    assert shard.downgrade_since(20) == Frontier.at(20)  # closing released the hold
    controller = CriticalReader(backend, "s", "controller", "epoch-1", Frontier.at(0))
    assert controller.since == Frontier.at(20)  # a new hold starts at the shard's since
    assert shard.downgrade_since(30) == Frontier.at(20)
    successor = CriticalReader(backend, "s", "controller", "epoch-2", Frontier.at(20))
    with pytest.raises(StorageError, match="fenced"):
        controller.compare_and_downgrade_since("epoch-1", "epoch-1b", Frontier.at(25))
    assert successor.compare_and_downgrade_since("epoch-2", "epoch-3",
                                                 Frontier.at(25)) == Frontier.at(25)


def test_a_listener_holds_since_at_what_it_has_delivered(pg: Storage) -> None:
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([([1, "a"], 3, 1)], 0, 10)
    controller = CriticalReader(backend, "s", "controller", "t", Frontier.at(0))
    listener = shard.listen(2)
    controller.compare_and_downgrade_since("t", "t", Frontier.at(8))
    assert shard.since == Frontier.at(2)  # the listener's lease holds it at its as_of
    batches = listener.poll()
    assert [u for b in batches for u in b.to_tuples()] == [([1, "a"], 3, 1)]
    backend.leases.heartbeat()  # carries the listener's progress: it delivered up to 9
    assert shard.since == Frontier.at(8)
    controller.compare_and_downgrade_since("t", "t", Frontier.at(9))
    assert shard.since == Frontier.at(9)
    shard.compare_and_append([([2, "b"], 12, 1)], 10, 20)
    controller.compare_and_downgrade_since("t", "t", Frontier.at(15))
    assert shard.since == Frontier.at(9)  # held by the listener, which has not read past 9
    assert [u for b in listener.poll() for u in b.to_tuples()] == [([2, "b"], 12, 1)]
    listener.close()
    backend.leases.heartbeat()  # the release is sent
    controller.compare_and_downgrade_since("t", "t", Frontier.at(15))
    assert shard.since == Frontier.at(15)
    assert backend._head("s").data.readers.keys() == {"controller"}


def test_a_listener_cannot_start_behind_since(pg: Storage) -> None:
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 10)
    shard.downgrade_since(5)
    with pytest.raises(SinceViolation):
        shard.listen(3)
    assert persist(pg)._head("s").data.readers == {}  # its lease was given back at once


def process_listen_and_hang(url: str, shard_id: str, ready: Any) -> None:
    """Child process: listen from 2 under a short lease, deliver, then hang until killed."""
    with open_storage(url) as storage:
        backend = storage.backend
        assert isinstance(backend, PersistBackend)
        backend.leases.lease_seconds = 0.6
        listener = storage.shard(shard_id).listen(2)
        listener.poll()
        ready.set()
        time.sleep(3600)


def test_a_listener_in_a_process_that_dies_stops_holding_once_its_lease_runs_out(
    pg: Storage,
) -> None:
    backend = persist(pg)
    shard = pg.create_shard("s", DESC)
    shard.compare_and_append([], 0, 10)
    controller = CriticalReader(backend, "s", "controller", "t", Frontier.at(0))
    ready = SPAWN.Event()
    proc = SPAWN.Process(target=process_listen_and_hang, args=(pg.url, "s", ready))
    proc.start()
    try:
        assert ready.wait(timeout=60)
        time.sleep(1.5)  # 2.5 leases: only heartbeats (carrying its progress, 9) keep it
        assert controller.compare_and_downgrade_since("t", "t", Frontier.at(10)) == \
            Frontier.at(9)
    finally:
        proc.kill()
        proc.join(timeout=30)
    time.sleep(0.8)  # no heartbeats now: the lease runs out
    assert controller.compare_and_downgrade_since("t", "t", Frontier.at(10)) == Frontier.at(10)


# -- time and frontiers ----------------------------------------------------------------------


def test_oracle_is_shared_through_the_database(pg_url: str) -> None:
    # Two handles whose clocks disagree (one is far behind, one steps backwards) still get
    # strictly increasing timestamps from the one oracle row.
    ahead = iter(range(1_000_000, 10**9, 7))
    with open_storage(pg_url, clock=lambda: next(ahead)) as one, \
            open_storage(pg_url, clock=lambda: 5) as two:
        stamps = []
        for i in range(30):
            stamps.append((one if i % 3 else two).oracle.write_ts())
        assert stamps == sorted(stamps) and len(set(stamps)) == 30
        assert two.oracle.read_ts() == stamps[-1]
        two.oracle.observe(stamps[-1] + 1000)
        assert one.oracle.write_ts() > stamps[-1] + 1000


def test_a_tick_advances_every_table_without_a_cas_each(pg: Storage) -> None:
    tables = [pg.create_table(f"t{i}", DESC) for i in range(40)]
    tables[3].insert([[1, "a"]])
    backend = persist(pg)
    calls = {"cas": 0, "run": 0}
    cas, run = backend.consensus.cas, backend.consensus.run

    def counting_cas(*a: Any, **k: Any) -> bool:
        calls["cas"] += 1
        return cas(*a, **k)

    def counting_run(*a: Any, **k: Any) -> Any:
        calls["run"] += 1
        return run(*a, **k)

    backend.consensus.cas = counting_cas  # type: ignore[method-assign]
    backend.consensus.run = counting_run  # type: ignore[method-assign]
    ts = pg.ticker().tick()
    assert calls["cas"] == 0 and calls["run"] <= 3  # list tables, one advancing round
    assert all(t.upper == Frontier.at(ts + 1) for t in tables)
    assert Counter(tuple(r) for r, _, _ in to_tuples(tables[3].snapshot(ts))) == {(1, "a"): 1}


def process_append_later(url: str, shard_id: str, go: Any) -> None:
    with open_storage(url) as storage:
        go.wait()
        storage.shard(shard_id).compare_and_append([([7, "x"], 1, 1)], 1, 2)


def process_tick_later(url: str, go: Any) -> None:
    with open_storage(url) as storage:
        go.wait()
        storage.advance_tables(Frontier.at(5))


def test_a_tick_in_another_process_wakes_a_listener(pg_url: str) -> None:
    with open_storage(pg_url, poll_interval=3600) as storage:
        table = storage.create_table("t", DESC)
        listener = table.shard.listen(0)
        go = SPAWN.Event()
        proc = SPAWN.Process(target=process_tick_later, args=(pg_url, go))
        proc.start()
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(listener.next_batch(timeout=60)))
        waiter.start()
        time.sleep(0.2)
        started = time.monotonic()
        go.set()
        waiter.join(timeout=90)
        proc.join(timeout=30)
        assert got and got[0] is not None and got[0].upper == Frontier.at(5)
        assert time.monotonic() - started < 30


def test_listener_in_another_process_is_woken_by_notify(pg_url: str) -> None:
    # The listener's safety-net poll is an hour: only a notification can wake it in time.
    with open_storage(pg_url, poll_interval=3600) as storage:
        shard = storage.create_shard("s", DESC)
        shard.compare_and_append([], 0, 1)
        listener = shard.listen(0)
        assert listener.poll() == []  # nothing after time 0 yet
        go = SPAWN.Event()
        proc = SPAWN.Process(target=process_append_later, args=(pg_url, "s", go))
        proc.start()
        got: list[Any] = []
        waiter = threading.Thread(target=lambda: got.append(listener.next_batch(timeout=60)))
        waiter.start()
        time.sleep(0.2)  # the waiter is subscribed and waiting
        started = time.monotonic()
        go.set()
        waiter.join(timeout=90)
        proc.join(timeout=30)
        assert got and got[0] is not None and got[0].to_tuples() == [([7, "x"], 1, 1)]
        assert time.monotonic() - started < 30


def test_only_versions_someone_listens_for_are_notified(pg: Storage) -> None:
    # A NOTIFY is a transaction with a commit record of its own: an append to a shard no
    # listener holds sends none; one to a shard a listener holds (its lease is in the state,
    # wherever the listener runs) does. One sender thread sends in order, so once the watched
    # shard's notification arrives, an earlier one for the quiet shard would have too.
    backend = persist(pg)
    quiet, watched = pg.create_shard("quiet", DESC), pg.create_shard("watched", DESC)
    listener = watched.listen(0)
    assert S.has_listeners(backend._head("watched").data)
    assert not S.has_listeners(backend._head("quiet").data)
    with psycopg.connect(backend.consensus.conninfo, autocommit=True) as raw:
        raw.execute(f'LISTEN "{backend.consensus.channel}"')
        quiet.compare_and_append([([1, "a"], 0, 1)], 0, 1)
        quiet.compare_and_append([], 1, 2)
        watched.compare_and_append([([2, "b"], 0, 1)], 0, 1)
        heard: list[str] = []
        deadline = time.monotonic() + 30
        while "watched" not in heard and time.monotonic() < deadline:
            heard += [n.payload for n in raw.notifies(timeout=1.0)]
    assert "watched" in heard and "quiet" not in heard, heard
    listener.close()
    assert not S.has_listeners(backend._head("watched").data)
