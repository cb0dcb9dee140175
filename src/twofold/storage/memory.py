"""The in-process backend behind `memory://name`.

Stores with the same name share state within a process (the registry below), so a test can open
a "controller" handle and a "replica" handle on one store. One lock per store makes every backend
method atomic; update tables are immutable Arrow tables, so they are stored and handed out
without copying. Nothing survives the process.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass, field, replace

import pyarrow as pa

from twofold.protocol import Frontier, RelationDesc
from twofold.storage.backend import Notifier, Part, PartInfo, ShardState
from twofold.storage.errors import StorageClosed, UnknownShard


@dataclass
class _MemoryShard:
    desc: RelationDesc
    upper: Frontier = field(default_factory=Frontier.minimum)
    since: Frontier = field(default_factory=Frontier.minimum)
    parts: list[Part] = field(default_factory=list)


class _MemoryStore:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.shards: dict[str, _MemoryShard] = {}
        self.next_part_id = 1
        self.notifier = Notifier()


_REGISTRY_LOCK = threading.Lock()
_REGISTRY: dict[str, _MemoryStore] = {}


def _store_named(name: str) -> _MemoryStore:
    with _REGISTRY_LOCK:
        store = _REGISTRY.get(name)
        if store is None:
            store = _REGISTRY[name] = _MemoryStore()
        return store


def drop_memory_store(name: str) -> None:
    """Forget the memory store called `name` (handles still open keep their reference)."""
    with _REGISTRY_LOCK:
        _REGISTRY.pop(name, None)


class MemoryBackend:
    """A `Backend` over a named in-process store; `name=None` gives a private store."""

    def __init__(self, name: str | None) -> None:
        self._store = _MemoryStore() if name is None else _store_named(name)
        self.notifier = self._store.notifier
        self._closed = False

    def _shard(self, shard_id: str) -> _MemoryShard:
        if self._closed:
            raise StorageClosed("this memory storage handle is closed")
        try:
            return self._store.shards[shard_id]
        except KeyError:
            raise UnknownShard(shard_id) from None

    def create_shard(self, shard_id: str, desc: RelationDesc) -> bool:
        with self._store.lock:
            if shard_id in self._store.shards:
                return False
            self._store.shards[shard_id] = _MemoryShard(desc)
            return True

    def describe(self, shard_id: str) -> RelationDesc:
        with self._store.lock:
            return self._shard(shard_id).desc

    def shard_ids(self) -> list[str]:
        if self._closed:
            raise StorageClosed("this memory storage handle is closed")
        with self._store.lock:
            return sorted(self._store.shards)

    def state(self, shard_id: str) -> ShardState:
        with self._store.lock:
            shard = self._shard(shard_id)
            return ShardState(shard.upper, shard.since)

    def compare_and_append(
        self, shard_id: str, lower: Frontier, new_upper: Frontier, updates: pa.Table | None
    ) -> Frontier | None:
        with self._store.lock:
            shard = self._shard(shard_id)
            if shard.upper != lower:
                return shard.upper
            if updates is not None and updates.num_rows and lower.time is not None:
                part_id = self._store.next_part_id
                self._store.next_part_id += 1
                shard.parts.append(
                    Part(part_id, lower.time, new_upper, 0, updates.num_rows, updates)
                )
            shard.upper = new_upper
        self.notifier.notify(shard_id)
        return None

    def advance_uppers(self, shard_ids: list[str], upper: Frontier) -> None:
        advanced = []
        with self._store.lock:
            for shard_id in shard_ids:
                shard = self._shard(shard_id)
                if shard.upper < upper:
                    shard.upper = upper
                    advanced.append(shard_id)
        for shard_id in advanced:
            self.notifier.notify(shard_id)

    def downgrade_since(self, shard_id: str, since: Frontier) -> Frontier:
        with self._store.lock:
            shard = self._shard(shard_id)
            shard.since = shard.since.join(since)
            result = shard.since
        self.notifier.notify(shard_id)
        return result

    def read_parts(
        self, shard_id: str, *, overlapping_from: int | None, up_to: int | None
    ) -> tuple[ShardState, list[Part]]:
        with self._store.lock:
            shard = self._shard(shard_id)
            parts = shard.parts
            state = ShardState(shard.upper, shard.since)
        if overlapping_from is not None:
            # Parts are disjoint and ordered, so only the last part starting at or before
            # `overlapping_from` can straddle it.
            start = max(0, bisect.bisect_right(parts, overlapping_from, key=_lower) - 1)
            parts = [p for p in parts[start:] if not p.upper.contains(overlapping_from)]
        if up_to is not None:
            parts = [p for p in parts if p.lower <= up_to]
        return state, list(parts)

    def part_infos(self, shard_id: str) -> tuple[ShardState, list[PartInfo]]:
        with self._store.lock:
            shard = self._shard(shard_id)
            return ShardState(shard.upper, shard.since), [
                PartInfo(p.part_id, p.lower, p.upper, p.since, p.count) for p in shard.parts
            ]

    def load_parts(self, shard_id: str, part_ids: list[int]) -> list[Part] | None:
        wanted = set(part_ids)
        with self._store.lock:
            found = [p for p in self._shard(shard_id).parts if p.part_id in wanted]
        return found if len(found) == len(wanted) else None

    def replace_parts(self, shard_id: str, old: list[int], new: Part) -> bool:
        wanted = set(old)
        with self._store.lock:
            shard = self._shard(shard_id)
            positions = [i for i, p in enumerate(shard.parts) if p.part_id in wanted]
            if len(positions) != len(wanted) or not positions:
                return False
            part_id = self._store.next_part_id
            self._store.next_part_id += 1
            first, last = positions[0], positions[-1]
            kept = [replace(new, part_id=part_id)] if new.count else []
            shard.parts = shard.parts[:first] + kept + shard.parts[last + 1:]
        return True

    def close(self) -> None:
        self._closed = True


def _lower(part: Part) -> int:
    return part.lower
