"""`Histogram.record` only appends (the samples are folded into the counts when read): every
reader — `counts`, `recent`, `export`, `absorb` — sees exactly what recording each sample in
turn leaves (the per-sample histogram below, the implementation before folding), however
reads, absorbs and records interleave, and no sample is lost to threads recording while
another reads."""

from __future__ import annotations

import sys
import threading
from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.runtime import introspection
from twofold.runtime.introspection import Histogram, bucket_us
from twofold.testing.profiles import examples


class PerSample:
    """The histogram as it was: every sample bucketed, counted and kept as it is recorded."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, int]] = Counter()
        self.recent: dict[str, list[float]] = {}
        self.total: Counter[str] = Counter()

    def record(self, runtime: str, seconds: float) -> None:
        self.counts[(runtime, bucket_us(seconds))] += 1
        kept = self.recent.setdefault(runtime, [])
        kept.append(seconds)
        self.total[runtime] += 1
        if len(kept) > 4096:
            del kept[: len(kept) - 2048]

    def absorb(self, runtime: str, counts: list[tuple[int, int]], samples: list[float]) -> None:
        for key in [k for k in self.counts if k[0] == runtime]:
            del self.counts[key]
        for le, n in counts:
            self.counts[(runtime, le)] = n
        kept = self.recent.setdefault(runtime, [])
        kept.extend(samples)
        self.total[runtime] += len(samples)
        if len(kept) > 4096:
            del kept[: len(kept) - 2048]

    def export(self, runtime: str, since: int) -> tuple[list[tuple[int, int]], list[float], int]:
        counts = sorted((le, n) for (rt, le), n in self.counts.items() if rt == runtime)
        total = self.total[runtime]
        kept = self.recent.get(runtime, [])
        return counts, kept[max(0, len(kept) - (total - since)):], total


_RUNTIMES = st.sampled_from(["interactive", "maintenance"])
_OPS = st.lists(st.one_of(
    st.tuples(st.just("record"), _RUNTIMES,
              st.floats(min_value=0, max_value=0.01, allow_nan=False),
              st.sampled_from([1, 7, 255, 256, 300, 2049, 4097])),
    st.tuples(st.just("read"), _RUNTIMES, st.integers(0, 9000)),
    st.tuples(st.just("absorb"), _RUNTIMES,
              st.lists(st.tuples(st.integers(1, 1 << 20), st.integers(1, 99)), max_size=3),
              st.integers(0, 3000)),
), max_size=14)


@given(_OPS)
@settings(max_examples=examples(120), deadline=None)
def test_every_reader_sees_what_per_sample_recording_leaves(ops: list[Any]) -> None:
    h, model = Histogram(), PerSample()
    for op in ops:
        if op[0] == "record":
            _, runtime, seconds, times = op
            for i in range(times):
                h.record(runtime, seconds * (i % 5))
                model.record(runtime, seconds * (i % 5))
        elif op[0] == "read":
            _, runtime, since = op
            assert h.export(runtime, since) == model.export(runtime, since)
            assert h.counts() == dict(model.counts)
            assert h.recent(runtime) == model.recent.get(runtime, [])
        else:
            _, runtime, counts, n = op
            samples = [j * 1e-6 for j in range(n)]
            h.absorb(runtime, counts, samples)
            model.absorb(runtime, counts, samples)
    assert h.counts() == dict(model.counts)
    for runtime in ("interactive", "maintenance"):
        assert h.recent(runtime) == model.recent.get(runtime, [])
        assert h.export(runtime, 0) == model.export(runtime, 0)


def test_kept_after_is_appending_in_turn() -> None:
    kept = 0
    for n in range(1, 12_000):
        kept += 1
        if kept > 4096:
            kept = 2048
        assert introspection._kept_after(n) == kept, n


def test_samples_recorded_while_others_read_are_all_counted() -> None:
    """Threads recording while another reads (and folds) lose no sample and count none
    twice."""
    h = Histogram()
    per_thread, threads = 20_000, 4
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    stop = threading.Event()

    def recorder(i: int) -> None:
        for j in range(per_thread):
            h.record(f"rt{i % 2}", (j % 100) * 1e-6)

    def reader() -> None:
        while not stop.is_set():
            h.counts()
            h.export("rt0", 0)

    try:
        rd = threading.Thread(target=reader)
        rd.start()
        ws = [threading.Thread(target=recorder, args=(i,)) for i in range(threads)]
        for w in ws:
            w.start()
        for w in ws:
            w.join()
        stop.set()
        rd.join()
    finally:
        sys.setswitchinterval(old)
    counts = h.counts()
    for rt in ("rt0", "rt1"):
        assert sum(n for (r, _), n in counts.items() if r == rt) == per_thread * threads // 2
        assert h.export(rt, 0)[2] == per_thread * threads // 2
        assert len(h.recent(rt)) == introspection._kept_after(per_thread * threads // 2)
    want: Counter[tuple[str, int]] = Counter()
    for i in range(threads):
        for j in range(per_thread):
            want[(f"rt{i % 2}", bucket_us((j % 100) * 1e-6))] += 1
    assert counts == dict(want)
