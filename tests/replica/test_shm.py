"""Published batches in memfds: exact round trips, zero copies, reclamation after every view."""

from __future__ import annotations

import gc
import os
from typing import Any

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.engine.batch import Batch, build_batch
from twofold.engine.frames import update_schema
from twofold.protocol import ColumnType
from twofold.replica import shm
from twofold.testing.profiles import examples

TYPES = [ColumnType("int"), ColumnType("str"), ColumnType("float"), ColumnType("bool"),
         ColumnType("bytes")]


def _batch(rows: list[tuple[Any, ...]]) -> Batch:
    sch = update_schema(TYPES)
    frame = pl.DataFrame([(*r, t, d) for *r, t, d in rows], schema=sch, orient="row")
    return build_batch(frame, ["c0"], 0, 100, 0)


def _equal(a: Batch, b: Batch) -> None:
    assert a.data.schema == b.data.schema
    assert a.data.equals(b.data, null_equal=True)
    assert np.array_equal(a.codes, b.codes) and np.array_equal(a.hashes, b.hashes)
    assert (a.lower, a.upper, a.since, a.tmin, a.tmax) == (b.lower, b.upper, b.since, b.tmin,
                                                         b.tmax)


rows_st = st.lists(st.tuples(
    st.none() | st.integers(-2**63, 2**63 - 1), st.none() | st.text(max_size=20),
    st.none() | st.floats(allow_nan=True), st.none() | st.booleans(),
    st.none() | st.binary(max_size=10), st.integers(0, 50), st.integers(-3, 3).filter(bool)),
    min_size=1, max_size=40)


@settings(max_examples=examples(40), deadline=None)
@given(rows=rows_st, inline=st.booleans())
def test_a_shared_batch_is_the_same_batch(rows: list[tuple[Any, ...]], inline: bool) -> None:
    batch = _batch(rows)
    pool = shm.BufferPool(inline_max=1 << 30 if inline else 0)
    try:
        shared = pool.share(batch)
        _equal(batch, shared.batch)
        assert (shared.fd < 0) == inline
        # The front's view: mapped read-only from the memfd (or read from the inline bytes).
        if inline:
            assert shared.data is not None
            front = shm.read_from(shared.data, shared.layout, lower=0, upper=100, since=0,
                                  tmin=batch.tmin, tmax=batch.tmax)
        else:
            mm = shm.map_readonly(os.dup(shared.fd), shared.layout, lambda: None)
            front = shm.read_from(mm, shared.layout, lower=0, upper=100, since=0,
                                  tmin=batch.tmin, tmax=batch.tmax)
            del mm
        _equal(batch, front)
        assert not front.codes.flags.writeable and not front.hashes.flags.writeable
    finally:
        pool.close()


def _memfd_ranges() -> list[tuple[int, int]]:
    """The address ranges of this process's memfd mappings (from /proc/self/maps)."""
    ranges = []
    with open("/proc/self/maps") as f:
        for line in f:
            if "memfd:" in line:
                lo, hi = line.split()[0].split("-")
                ranges.append((int(lo, 16), int(hi, 16)))
    return ranges


def _in_memfd(arr: np.ndarray) -> bool:
    """Whether `arr`'s memory lies inside a memfd mapping (a view of it, not a heap copy)."""
    start, stop = arr.ctypes.data, arr.ctypes.data + arr.nbytes
    return any(lo <= start and stop <= hi for lo, hi in _memfd_ranges())


def test_the_twin_and_the_front_view_copy_nothing() -> None:
    """Maintenance's twin and the front's batch are views of the memfd, not heap copies: their
    key column, sort codes and hashes lie inside memfd mappings. Checked by address, which,
    unlike resident-memory figures, does not depend on when the allocator returns pages."""
    n = 400_000
    frame = pl.DataFrame({"c0": np.arange(n), "c1": [f"v{i % 97}" for i in range(n)],
                          "time": np.zeros(n, np.uint64), "diff": np.ones(n, np.int64)})
    batch = build_batch(frame, ["c0"], 0, 1, 0)
    del frame
    pool = shm.BufferPool()
    shared = pool.share(batch)
    assert shared.fd >= 0
    assert not _in_memfd(batch.codes), "the check cannot tell a heap array from a view"
    mm = shm.map_readonly(os.dup(shared.fd), shared.layout, lambda: None)
    front = shm.read_from(mm, shared.layout, lower=0, upper=1, since=0, tmin=0, tmax=0)
    assert front.data.height == n and int(front.data["c0"].sum()) == n * (n - 1) // 2
    assert np.array_equal(front.codes, batch.codes)
    assert np.array_equal(front.hashes, batch.hashes)
    for side, view in (("front", front), ("twin", shared.batch)):
        for name, arr in (("codes", view.codes), ("hashes", view.hashes),
                          ("c0", view.data["c0"].to_numpy())):
            assert _in_memfd(arr), f"{side}'s {name} is a copy, not a view of the memfd"
    del front, mm
    pool.close()


def test_a_buffer_is_reused_only_after_the_front_and_maintenance_released_it() -> None:
    pool = shm.BufferPool(inline_max=0)
    released: list[int] = []
    first = pool.share(_batch([(1, "a", 1.0, True, b"x", 1, 1)] * 1 + [
        (i, "b", 2.0, False, None, 2, 1) for i in range(2, 500)]))
    bid, fd = first.buffer, first.fd
    pool.sent(bid)
    mm = shm.map_readonly(os.dup(fd), first.layout, lambda: released.append(bid))
    front = shm.read_from(mm, first.layout, lower=0, upper=100, since=0, tmin=1, tmax=2)
    del mm
    twin = first.batch
    del first
    assert pool.live_buffers == 1
    del twin
    gc.collect()
    assert pool.live_buffers == 1 and pool.free_buffers == 0, "freed while the front maps it"
    del front
    gc.collect()
    assert released == [bid]
    pool.released(released)
    assert pool.live_buffers == 0 and pool.free_buffers == 1
    again = pool.share(_batch([(i, "c", 3.0, True, b"", 3, 1) for i in range(500)]))
    assert again.fd == fd and again.buffer != bid  # the same memfd, a new buffer id
    pool.close()


def test_releases_beyond_the_budget_close_the_memfd() -> None:
    pool = shm.BufferPool(inline_max=0, budget=0)
    shared = pool.share(_batch([(i, "b", 2.0, False, None, 2, 1) for i in range(500)]))
    fd = shared.fd
    del shared
    gc.collect()
    assert pool.free_buffers == 0 and pool.live_buffers == 0
    with pytest.raises(OSError):
        os.fstat(fd)


def _shared_then_freed(pool: shm.BufferPool, rows: int) -> int:
    """Share a batch of `rows` rows (never sent to the front), drop it: its memfd is free."""
    shared = pool.share(_batch([(i, "b", 2.0, False, None, 2, 1) for i in range(rows)]))
    fd = shared.fd
    del shared
    gc.collect()
    assert pool.free_buffers == 1
    return fd


@pytest.mark.parametrize(("first", "then"), [(20_000, 500), (500, 20_000)])
def test_a_free_buffer_of_another_size_is_resized_and_reused(first: int, then: int) -> None:
    """A merge's output rarely has the size of the batch it replaces: a free memfd much larger
    is shrunk (its spare pages go), a smaller one grown, rather than a fresh one allocated."""
    pool = shm.BufferPool(inline_max=0)
    fd = _shared_then_freed(pool, first)
    batch = _batch([(i, "c", 3.0, True, b"", 3, 1) for i in range(then)])
    again = pool.share(batch)
    assert again.fd == fd and pool.free_buffers == 0
    assert os.fstat(fd).st_size >= again.layout.size
    assert os.fstat(fd).st_size <= again.layout.size + again.layout.size // 4 + (64 << 10)
    _equal(again.batch, batch)
    pool.close()


def test_a_reused_buffer_is_written_through_the_kept_mapping_and_reads_back() -> None:
    """A free buffer of about the size keeps the pool's writable mapping: the next batch is
    written into it (the same mapping object, no new populate), and both maintenance's twin and
    a front view of it read the new rows — not the old ones."""
    pool = shm.BufferPool(inline_max=0)
    _shared_then_freed(pool, 500)
    writer = pool._free[0].writer
    assert writer is not None
    batch = _batch([(i, "c", 3.0, True, b"", 3, 1) for i in range(500)])
    again = pool.share(batch)
    assert pool._live[again.buffer].writer is writer
    _equal(again.batch, batch)
    mm = shm.map_readonly(os.dup(again.fd), again.layout, lambda: None)
    b = batch
    _equal(shm.read_from(mm, again.layout, lower=b.lower, upper=b.upper, since=b.since,
                         tmin=b.tmin, tmax=b.tmax), batch)
    pool.close()


def test_at_rest_free_buffers_are_unmapped_and_a_reuse_maps_again() -> None:
    pool = shm.BufferPool(inline_max=0)
    fd = _shared_then_freed(pool, 500)
    pool.unmap_free()
    assert pool._free[0].writer is None
    batch = _batch([(i, "d", 4.0, False, b"y", 4, 1) for i in range(500)])
    again = pool.share(batch)
    assert again.fd == fd and pool._live[again.buffer].writer is not None
    _equal(again.batch, batch)
    pool.close()
