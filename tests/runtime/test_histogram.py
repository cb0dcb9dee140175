"""`Histogram`: per-runtime bucket counts and recent samples, as `record` and `absorb` leave
them, against a plain model of what they must hold."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.runtime.introspection import Histogram, bucket_us
from twofold.testing.profiles import examples

_SAMPLES = st.lists(
    st.tuples(st.sampled_from(["interactive", "maintenance"]),
              st.floats(min_value=0, max_value=2.0, allow_nan=False)),
    max_size=60,
)


@given(_SAMPLES, st.integers(min_value=1, max_value=3))
@settings(max_examples=examples(100))
def test_record_keeps_counts_totals_and_recent_samples(samples: list[tuple[str, float]],
                                                       repeat: int) -> None:
    h = Histogram()
    counts: Counter[tuple[str, int]] = Counter()
    recent: dict[str, list[float]] = {}
    for runtime, seconds in samples * repeat * 40:  # past 4096 samples: the recent list trims
        h.record(runtime, seconds)
        counts[(runtime, bucket_us(seconds))] += 1
        kept = recent.setdefault(runtime, [])
        kept.append(seconds)
        if len(kept) > 4096:
            del kept[: len(kept) - 2048]
    assert h.counts() == dict(counts)
    for runtime, kept in recent.items():
        assert h.recent(runtime) == kept
        exported, tail, total = h.export(runtime, 0)
        assert total == sum(n for (rt, _), n in counts.items() if rt == runtime)
        assert exported == sorted((le, n) for (rt, le), n in counts.items() if rt == runtime)
        assert tail == kept[-total:]


def test_bucket_bounds() -> None:
    assert [bucket_us(s) for s in (0.0, 1e-6, 1.5e-6, 2e-6, 3e-6, 1e-3)] == [1, 1, 1, 2, 4, 1024]
