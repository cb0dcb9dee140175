"""The timestamp oracle: strictly increasing, robust to a clock that steps back."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.storage import TimestampOracle, wall_clock_ms
from twofold.testing.profiles import examples


def test_default_clock_is_wall_clock_milliseconds() -> None:
    before = wall_clock_ms()
    stamp = TimestampOracle().write_ts()
    assert before <= stamp <= wall_clock_ms() + 1
    assert stamp > 1_600_000_000_000  # milliseconds since the epoch, not seconds


@settings(max_examples=examples(50))
@given(st.lists(st.integers(0, 10**6), min_size=1, max_size=40))
def test_oracle_is_strictly_increasing_whatever_the_clock_does(readings: list[int]) -> None:
    clock: Iterator[int] = iter(readings)
    oracle = TimestampOracle(clock=lambda: next(clock))
    stamps = [oracle.write_ts() for _ in readings]
    assert all(a < b for a, b in itertools.pairwise(stamps))
    assert all(s >= r for s, r in zip(stamps, readings, strict=True))  # never behind the clock
    assert oracle.read_ts() == stamps[-1]


def test_oracle_when_the_clock_steps_back() -> None:
    readings = iter([1000, 1005, 900, 900, 1006])
    oracle = TimestampOracle(clock=lambda: next(readings))
    assert [oracle.write_ts() for _ in range(5)] == [1000, 1005, 1006, 1007, 1008]
    assert TimestampOracle(clock=lambda: 10).write_ts(at_least=50) == 50


def test_oracle_observe_fast_forwards() -> None:
    oracle = TimestampOracle(clock=lambda: 10)
    oracle.observe(5000)
    assert oracle.write_ts() == 5001


def test_oracle_is_thread_safe() -> None:
    oracle = TimestampOracle(clock=lambda: 0)
    stamps: list[int] = []
    barrier = threading.Barrier(4)

    def grab() -> None:
        barrier.wait()
        stamps.extend(oracle.write_ts() for _ in range(500))

    threads = [threading.Thread(target=grab) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(stamps) == list(range(2000))


