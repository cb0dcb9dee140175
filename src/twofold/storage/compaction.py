"""Compaction planning: which stored parts of a shard to merge, decided from metadata alone.

Only parts wholly behind `since` (every time `< since`) are merged. Their times are
indistinguishable to any permitted read (every read is at `>= since`), so merging advances them to
`since` and drops rows whose diffs cancel; parts at or beyond `since` are never touched, which is
what keeps listeners' views exact. Merging is geometric, like a spine: the parts that became
eligible since the last compaction form a run, and the run absorbs older merged parts while they
are at most `FACTOR` times its size. Merged sizes therefore fall geometrically from the oldest
part, a shard keeps O(log n) parts behind `since`, and each update is rewritten O(log n) times.

This module is pure: it takes part metadata and returns a plan; `Shard.compact` executes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from twofold.protocol import Frontier
from twofold.storage.backend import PartInfo

FACTOR: Final = 2


def behind(part: PartInfo, since: Frontier) -> bool:
    """Is every time of `part` before `since`?"""
    upper = part.upper.time
    return upper is not None and (since.time is None or upper <= since.time)


def settled(part: PartInfo) -> bool:
    """Was `part` produced by a compaction that left every one of its times at `part.since`?"""
    return part.upper.time is not None and part.upper.time <= part.since


def plan_compaction(parts: Sequence[PartInfo], since: Frontier) -> list[int]:
    """The ids of the adjacent parts to merge into one (empty: nothing worth doing)."""
    eligible = 0
    while eligible < len(parts) and behind(parts[eligible], since):
        eligible += 1
    start = eligible
    while start > 0 and not settled(parts[start - 1]):
        start -= 1
    if start == eligible:
        return []
    run = sum(p.count for p in parts[start:eligible])
    while start > 0 and parts[start - 1].count <= FACTOR * run:
        start -= 1
        run += parts[start].count
    return [p.part_id for p in parts[start:eligible]]
