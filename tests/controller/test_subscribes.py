"""Subscribe merging: random duplicated, overlapping, restarted streams from several replicas and
epochs are delivered contiguous, exactly once, with no gaps."""

from __future__ import annotations

import itertools
from collections import Counter
from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.controller.subscribes import SubscribeMerger
from twofold.protocol import Frontier, GlobalId, SubscribeBatch, SubscribeDroppedAt
from twofold.testing.profiles import examples

ID = GlobalId.transient(1)
END = 12


def truth_updates(lo: int, hi: int) -> list[tuple[int, list[object], int]]:
    """The true updates at times in [lo, hi): row [t, k] with diff 1 for k < t % 3 + 1."""
    return [(t, [t, k], 1) for t in range(lo, hi) for k in range(t % 3 + 1)]


@dataclass
class Source:
    """One replica in one epoch: replays from `as_of` (snapshot at `as_of`), then contiguous."""

    lower: int
    as_of: int
    first: bool = True

    def next_batch(self, upper: int) -> SubscribeBatch:
        lo = self.lower
        if self.first:
            # The first batch starts at the minimum and carries the snapshot consolidated at as_of.
            snap: Counter[tuple[object, ...]] = Counter()
            for _t, row, d in truth_updates(0, self.as_of + 1):
                snap[tuple(row)] += d
            updates = [(self.as_of, list(r), d) for r, d in snap.items()]
            updates += truth_updates(self.as_of + 1, upper)
            self.first = False
            lo = 0
        else:
            updates = truth_updates(lo, upper)
        self.lower = upper
        up = Frontier.empty() if upper >= END else Frontier.at(upper)
        return SubscribeBatch(lower=Frontier.at(lo), upper=up, updates=updates)


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_merged_stream_is_contiguous_and_exactly_once(data: st.DataObject) -> None:
    merger = SubscribeMerger(ID)
    sources = [Source(0, 0) for _ in range(data.draw(st.integers(1, 3)))]
    delivered: list[SubscribeBatch] = []
    for _ in range(80):
        if merger.finished:
            break
        i = data.draw(st.integers(0, len(sources) - 1))
        action = data.draw(st.sampled_from(["batch", "batch", "batch", "restart", "duplicate"]))
        if action == "restart":
            # A reconnect replays the subscribe at most one step behind what was delivered.
            d = 0 if merger.upper is None else (merger.upper.time or END)
            sources[i] = Source(0, data.draw(st.integers(0, max(0, d - 1))))
            continue
        src = sources[i]
        if src.lower >= END:
            continue
        upper = data.draw(st.integers(src.lower + 1, END))
        batch = src.next_batch(upper)
        out = merger.absorb(batch)
        if out is not None:
            delivered.append(out)
        if action == "duplicate":  # the same batch delivered again (e.g. a second replica)
            assert merger.absorb(batch) is None
    # Drive one source to the end so the stream completes.
    src = Source(0, 0)
    while not merger.finished:
        out = merger.absorb(src.next_batch(END))
        if out is not None:
            delivered.append(out)

    assert merger.gaps == 0
    assert delivered[0].lower == Frontier.at(0)
    for a, b in itertools.pairwise(delivered):
        assert a.upper == b.lower  # contiguous, no gaps, no overlaps
        assert a.lower < a.upper
    assert delivered[-1].upper.is_empty
    got = Counter((t, tuple(r), d) for b in delivered for t, r, d in b.updates or [])
    want = Counter((t, tuple(r), d) for t, r, d in truth_updates(0, END))
    assert got == want  # exactly once
    # Nothing follows the end.
    assert merger.absorb(Source(0, 0).next_batch(END)) is None


def test_gap_is_refused_and_error_ends_once() -> None:
    m = SubscribeMerger(ID)
    b = m.absorb(SubscribeBatch(lower=Frontier.at(0), upper=Frontier.at(3), updates=[]))
    assert b is not None and b.upper == Frontier.at(3)
    assert m.absorb(SubscribeBatch(lower=Frontier.at(5), upper=Frontier.at(8), updates=[])) is None
    assert m.gaps == 1 and m.upper == Frontier.at(3)
    e = m.absorb(SubscribeBatch(lower=Frontier.at(3), upper=Frontier.at(4), error="too big"))
    assert e is not None and e.error == "too big" and m.finished and m.error == "too big"
    assert m.absorb(SubscribeDroppedAt(frontier=Frontier.at(4))) is None
    assert m.dropped_at is None


def test_dropped_at_ends_the_stream() -> None:
    m = SubscribeMerger(ID)
    assert m.absorb(SubscribeDroppedAt(frontier=Frontier.at(0))) is None
    assert m.finished and m.dropped_at == Frontier.at(0)
    assert m.absorb(SubscribeBatch(lower=Frontier.at(0), upper=Frontier.at(1), updates=[])) is None
