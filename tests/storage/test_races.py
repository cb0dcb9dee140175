"""Concurrency and durability: racing writers (threads and processes), a writer killed with
SIGKILL mid-append, and a reader in another process while a writer appends."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from twofold.storage import Storage, open_storage, to_tuples
from twofold.testing.profiles import examples

from .helpers import (
    BIG,
    append_with_retry,
    fresh_id,
    process_endless_writer,
    process_reader,
    process_writer,
    whole_batches,
)

SPAWN = multiprocessing.get_context("spawn")


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)
@given(threads=st.integers(2, 5), per_thread=st.integers(1, 4), size=st.integers(1, 50))
def test_racing_threads_each_upper_has_one_winner(shared_storage: Storage, threads: int,
                                                  per_thread: int, size: int) -> None:
    shard = shared_storage.create_shard(fresh_id(), BIG)
    barrier = threading.Barrier(threads)
    wins: list[tuple[int, int, int]] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            barrier.wait()
            for seq in range(per_thread):
                t = append_with_retry(shard, w, seq, size)
                with lock:
                    wins.append((w, seq, t))
        except BaseException as e:  # reported below: a thread's failure must fail the test
            errors.append(e)

    pool = [threading.Thread(target=writer, args=(w,)) for w in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors
    total = threads * per_thread
    assert sorted(t for _, _, t in wins) == list(range(total)), "exactly one winner per upper"
    assert whole_batches(shard, size) == {(w, s) for w, s, _ in wins}
    # Each batch sits exactly at the time its writer won.
    for w, seq, t in wins:
        rows = to_tuples(shard.snapshot(t))
        assert Counter(r[1] for r in [row for row, _, _ in rows] if r[0] == w)[seq] == size


def test_racing_processes_each_upper_has_one_winner(process_url: str) -> None:
    url = process_url
    writers, per_writer, size = 3, 5, 200
    with open_storage(url) as storage:
        shard = storage.create_shard("race", BIG)
        ready, start, wins = SPAWN.Semaphore(0), SPAWN.Event(), SPAWN.Queue()
        procs = [
            SPAWN.Process(target=process_writer,
                          args=(url, "race", w, per_writer, size, ready, start, wins))
            for w in range(writers)
        ]
        for p in procs:
            p.start()
        for _ in procs:
            assert ready.acquire(timeout=60)
        start.set()
        results = [wins.get(timeout=60) for _ in range(writers * per_writer)]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert sorted(t for _, _, t in results) == list(range(writers * per_writer))
        assert whole_batches(shard, size) == {(w, s) for w, s, _ in results}


def test_sigkilled_writer_leaves_whole_batches(process_url: str) -> None:
    url = process_url
    size = 20_000  # large batches: the kill most likely lands inside an append
    with open_storage(url) as storage:
        storage.create_shard("k", BIG)
    appended = SPAWN.Event()
    proc = SPAWN.Process(target=process_endless_writer, args=(url, "k", size, appended))
    proc.start()
    try:
        assert appended.wait(timeout=60)
    finally:
        assert proc.pid is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=30)
    assert proc.exitcode == -signal.SIGKILL
    with open_storage(url) as storage:
        shard = storage.shard("k")
        tags = whole_batches(shard, size)
        upper = shard.upper.time
        assert upper is not None and upper >= 3
        assert tags == {(0, s) for s in range(upper)}  # a contiguous prefix of the appends
        first = Counter(map(repr, to_tuples(shard.snapshot(upper - 1))))
        # The shard is still writable from where the dead writer left it.
        append_with_retry(shard, 1, 0, 10)
    with open_storage(url) as storage:
        again = Counter(map(repr, to_tuples(storage.shard("k").snapshot(upper - 1))))
        assert again == first


@pytest.mark.parametrize("target", [12])
def test_reader_in_another_process_sees_consistent_prefixes(process_url: str,
                                                           target: int) -> None:
    url = process_url
    size = 2_000
    with open_storage(url) as storage:
        shard = storage.create_shard("r", BIG)
        ready, results = SPAWN.Event(), SPAWN.Queue()
        proc = SPAWN.Process(target=process_reader, args=(url, "r", size, target, ready, results))
        proc.start()
        assert ready.wait(timeout=60)
        for seq in range(target):
            append_with_retry(shard, 0, seq, size)
        verdict = results.get(timeout=60)
        proc.join(timeout=30)
    assert verdict[0] == "ok", verdict
    _, snapshots, listened = verdict
    assert snapshots >= 1
    assert listened == list(range(1, target))  # every batch after as_of 0, once, in order
