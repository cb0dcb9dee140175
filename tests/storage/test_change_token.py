"""On SQLite a listener's poll reads nothing when `SqliteBackend.change_token` says no commit to
the file has ended since its last read (the idle maintenance process's polls), and stays exact:
this handle's own writes, another handle's (another connection, no notifier in common) and
another process's are each seen by the next poll — by a waiting listener within its poll
interval — and a since another connection moved still raises."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import Frontier
from twofold.storage import Listener, SinceViolation, Storage, open_storage, to_tuples
from twofold.storage.backend import Notifier
from twofold.storage.sqlite import SqliteBackend
from twofold.storage.table import TABLE_PREFIX
from twofold.testing.profiles import examples

from .helpers import DESC, fresh_id

BOUND = 1.0
"""Seconds a waiting listener may take to see another connection's append: its poll interval
(10 ms) with room for a loaded machine."""


class CountingReads:
    """Counts the backend's reads of shard state and parts (what a skipped poll avoids)."""

    def __init__(self, backend: SqliteBackend, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reads = 0
        for name in ("state", "read_parts"):
            real = getattr(backend, name)

            def counted(*args: object, _real: object = real, **kwargs: object) -> object:
                self.reads += 1
                return _real(*args, **kwargs)  # type: ignore[operator]

            monkeypatch.setattr(backend, name, counted)


def sqlite_backend(storage: Storage) -> SqliteBackend:
    backend = storage.backend
    assert isinstance(backend, SqliteBackend)
    return backend


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/token.db"


@pytest.fixture
def pair(url: str) -> Iterator[tuple[Storage, Storage]]:
    """Two handles on one file whose notifiers are apart: the second writes as another process
    would, telling the first's listeners nothing."""
    with open_storage(url) as storage, open_storage(url) as other:
        sqlite_backend(other).notifier = Notifier()
        yield storage, other


def rows(listener: Listener) -> list[tuple[object, ...]]:
    return [tuple(r) for b in listener.poll() for r, _, _ in to_tuples(b.updates)]


def test_token_moves_exactly_at_commits(pair: tuple[Storage, Storage]) -> None:
    storage, other = pair
    backend = sqlite_backend(storage)
    shard = storage.create_shard(fresh_id(), DESC)
    first = backend.change_token()
    assert backend.change_token() == first  # nothing committed: equal
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 1)  # this thread's own commit
    second = backend.change_token()
    assert second != first
    other.shard(shard.shard_id).compare_and_append([], 1, 2)  # another connection's
    third = backend.change_token()
    assert third != second
    writer = threading.Thread(target=shard.compare_and_append, args=([], 2, 3))
    writer.start()  # this handle, another thread: another connection
    writer.join()
    assert backend.change_token() != third
    assert backend.change_token() == backend.change_token()


def test_idle_polls_skip_their_reads(pair: tuple[Storage, Storage],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    storage, other = pair
    shard = storage.create_shard(fresh_id(), DESC)
    shard.compare_and_append([([1, "a"], 0, 1)], 0, 1)
    listener = shard.listen(0)
    counter = CountingReads(sqlite_backend(storage), monkeypatch)
    assert rows(listener) == []  # nothing after 0 yet; this poll reads
    assert counter.reads == 1
    for _ in range(50):
        assert listener.poll() == []
    assert counter.reads == 1  # idle: no read at all
    # This handle's own append (same thread, same connection: data_version does not move).
    shard.compare_and_append([([2, "b"], 1, 1)], 1, 2)
    assert rows(listener) == [(2, "b")]
    assert listener.frontier == Frontier.at(2)
    reads = counter.reads
    assert listener.poll() == [] and counter.reads == reads
    # Another connection's append: seen by the next poll.
    other.shard(shard.shard_id).compare_and_append([([3, "c"], 2, 1)], 2, 3)
    assert rows(listener) == [(3, "c")]
    reads = counter.reads
    assert listener.poll() == [] and counter.reads == reads
    # An upper moved by the ticker's autocommit round (not a BEGIN ... COMMIT transaction).
    table = storage.create_table(fresh_id("t"), DESC)
    assert table.shard.shard_id.startswith(TABLE_PREFIX)
    table_listener = table.shard.listen(0)
    assert table_listener.poll() == []
    sqlite_backend(storage).advance_prefixed_uppers(TABLE_PREFIX, Frontier.at(5))
    assert [(b.lower, b.upper) for b in table_listener.poll()] == [
        (Frontier.at(1), Frontier.at(5))]


def test_polls_from_other_threads_compare_no_other_connections_version(
        pair: tuple[Storage, Storage]) -> None:
    """`data_version` numbers each connection apart (`anext_batch` fills on worker threads):
    a token from one thread's connection never matches another's."""
    storage, other = pair
    shard = storage.create_shard(fresh_id(), DESC)
    shard.compare_and_append([], 0, 1)
    listener = shard.listen(0)

    def in_thread(fn: Callable[[], object]) -> object:
        out: list[object] = []
        t = threading.Thread(target=lambda: out.append(fn()))
        t.start()
        t.join()
        return out[0]

    for i in range(1, 6):
        assert in_thread(lambda: rows(listener)) == []  # a fresh thread, a fresh connection
        other.shard(shard.shard_id).compare_and_append([([i, "t"], i, 1)], i, i + 1)
        assert in_thread(lambda: rows(listener)) == [(i, "t")]


def test_waiting_listener_sees_another_connections_append(
        pair: tuple[Storage, Storage]) -> None:
    storage, other = pair
    shard = storage.create_shard(fresh_id(), DESC)
    listener = shard.listen(0)
    assert listener.next_batch(timeout=0.1) is None  # polled idle (skipping) for 100 ms
    appended: list[float] = []

    def append() -> None:
        time.sleep(0.2)
        other.shard(shard.shard_id).compare_and_append([([7, "x"], 1, 1)], 0, 2)
        appended.append(time.monotonic())

    writer = threading.Thread(target=append)
    writer.start()
    batch = listener.next_batch(timeout=10.0)
    seen = time.monotonic()
    writer.join()
    assert batch is not None and to_tuples(batch.updates) == [([7, "x"], 1, 1)]
    assert seen - appended[0] < BOUND


def test_waiting_listener_sees_another_process_append(url: str) -> None:
    with open_storage(url) as storage:
        shard = storage.create_shard(fresh_id(), DESC)
        listener = shard.listen(0)
        assert listener.next_batch(timeout=0.1) is None
        script = (
            "import sys, time\n"
            "from twofold.storage import open_storage\n"
            "with open_storage(sys.argv[1]) as s:\n"
            "    s.shard(sys.argv[2]).compare_and_append([([9, 'p'], 1, 1)], 0, 2)\n"
            "    print(time.monotonic(), flush=True)\n"
        )
        child = subprocess.Popen([sys.executable, "-c", script, url, shard.shard_id],
                                 stdout=subprocess.PIPE, text=True)
        batch = listener.next_batch(timeout=30.0)
        seen = time.monotonic()
        out, _ = child.communicate(timeout=30.0)
        assert child.returncode == 0
        assert batch is not None and to_tuples(batch.updates) == [([9, "p"], 1, 1)]
        assert seen - float(out) < BOUND  # CLOCK_MONOTONIC is system-wide on Linux


def test_since_moved_by_another_connection_still_raises(pair: tuple[Storage, Storage]) -> None:
    storage, other = pair
    shard = storage.create_shard(fresh_id(), DESC)
    shard.compare_and_append([], 0, 5)
    listener = shard.listen(1)
    assert [(b.lower, b.upper) for b in listener.poll()] == [(Frontier.at(2), Frontier.at(5))]
    assert listener.poll() == []  # skipped
    other.shard(shard.shard_id).downgrade_since(4, compact=False)
    assert listener.poll() == []  # since 4, the last delivered time: still readable
    other.shard(shard.shard_id).downgrade_since(5, compact=False)
    with pytest.raises(SinceViolation):
        listener.poll()


OPS = st.lists(st.sampled_from(["local", "other", "other-thread", "since", "poll"]),
               max_size=25)


@settings(max_examples=examples(40), deadline=None)
@given(ops=OPS)
def test_every_poll_ends_at_the_actual_upper(ops: list[str]) -> None:
    """Over any interleaving of writes (this thread, another thread of this handle, another
    connection) and polls, each poll delivers exactly the appended rows and ends at the
    shard's actual upper, as a poll that always reads would."""
    with tempfile.TemporaryDirectory() as d, open_storage(f"sqlite:///{d}/p.db") as storage, \
            open_storage(f"sqlite:///{d}/p.db") as other:
        sqlite_backend(other).notifier = Notifier()
        shard = storage.create_shard(fresh_id(), DESC)
        shard.compare_and_append([], 0, 1)
        listener = shard.listen(0)
        written: list[tuple[object, ...]] = []
        delivered: list[tuple[object, ...]] = []
        upper = 1
        for i, op in enumerate(ops):
            if op == "poll":
                delivered += rows(listener)
                assert listener.frontier == shard.upper
                assert Counter(delivered) == Counter(written)
                continue
            if op == "since":
                other.shard(shard.shard_id).downgrade_since(0, compact=False)
                continue
            row = ([i, op], upper, 1)
            target = shard if op != "other" else other.shard(shard.shard_id)
            if op == "other-thread":
                t = threading.Thread(target=target.compare_and_append,
                                     args=([row], upper, upper + 1))
                t.start()
                t.join()
            else:
                target.compare_and_append([row], upper, upper + 1)
            written.append((i, op))
            upper += 1
        delivered += rows(listener)
        assert listener.frontier == shard.upper == Frontier.at(upper)
        assert Counter(delivered) == Counter(written)
