"""Reading parts of `PersistBackend` (a mixin over `PartsCore`): the inlined parts' cache,
loading parts from rows or blobs, and the reads that retry when a compaction deletes what they
were about to load (the head has moved on; read it again)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import psycopg
import pyarrow as pa

from twofold.storage.backend import Part, PartInfo, ShardState
from twofold.storage.errors import CorruptStorage, StorageError
from twofold.storage.persist import state as S
from twofold.storage.persist.base import Core
from twofold.storage.persist.blob import BlobMissing
from twofold.storage.persist.state import PartRef
from twofold.storage.updates import decode_batch, decode_ipc


class PartsCore(Core, Protocol):
    _inline: dict[str, dict[str, pa.Table]]
    """Inlined parts, decoded, per shard (they never change once committed)."""

    def _schema(self, shard_id: str) -> pa.Schema: ...

    def _state_of(self, head: S.Head) -> ShardState: ...


if TYPE_CHECKING:
    _Base = PartsCore
else:
    _Base = object


class PartReads(_Base):
    """The part-reading commands of `PersistBackend` (a mixin: mypy checks them against
    `PartsCore`, what they use of it)."""

    def _fetch_inline(self, shard_id: str, refs: list[PartRef]) -> dict[str, pa.Table]:
        """The updates of the inlined parts among `refs`: cached ones (they never change), the
        rest in one query; `BlobMissing` if a row is gone (its part was replaced and the
        versions referencing it truncated: the head has moved on)."""
        cache = self._inline.setdefault(shard_id, {})
        wanted = [r.inline for r in refs if r.inline is not None and r.inline not in cache]
        if wanted:
            def fetch(cur: psycopg.Cursor[Any]) -> list[Any]:
                cur.execute(f"SELECT key, data FROM {self.schema}.parts WHERE shard = %s "
                            f"AND key = ANY(%s)", (shard_id, wanted))
                return cur.fetchall()

            schema = self._schema(shard_id)
            for key, data in self.consensus.run(f"reading shard {shard_id!r} parts", fetch):
                cache[key] = decode_batch(bytes(data), schema,
                                          f"shard {shard_id!r} inlined part {key}")
            if any(k not in cache for k in wanted):
                raise BlobMissing(f"shard {shard_id!r}: an inlined part is gone")
        return cache

    def _load_all(self, shard_id: str, refs: list[PartRef]) -> list[Part]:
        inline = self._fetch_inline(shard_id, refs)
        return [self._load(shard_id, r, inline) for r in refs]

    def _load(self, shard_id: str, ref: PartRef, inline: dict[str, pa.Table]) -> Part:
        raw: bytes | memoryview
        if ref.inline is not None:
            table = inline[ref.inline]
        elif ref.key is not None:
            raw = self.blobs.get(ref.key)
            table = decode_ipc(raw, self._schema(shard_id),  # type: ignore[arg-type]
                               f"shard {shard_id!r} part {ref.id}")
        else:
            raise CorruptStorage(f"shard {shard_id!r} part {ref.id}: neither inlined nor in "
                                 f"a blob")
        if table.num_rows != ref.count:
            raise CorruptStorage(f"shard {shard_id!r} part {ref.id}: holds {table.num_rows} "
                                 f"updates, recorded {ref.count}")
        return Part(ref.id, ref.lower, S.dec(ref.upper), ref.since, ref.count, table)

    def _prune_inline(self, shard_id: str, head: S.Head) -> None:
        """Forget cached inlined parts the head no longer references."""
        cache = self._inline.get(shard_id)
        if cache:
            live = S.inline_keys_of(head.data)
            if len(cache) > len(live):
                self._inline[shard_id] = {k: v for k, v in cache.items() if k in live}

    def _read(self, shard_id: str,
              select: Callable[[S.Head], list[PartRef] | None]) -> tuple[S.Head, list[Part] | None]:
        """Load the parts `select` picks from a fresh head; a blob deleted under us (its part
        was compacted away) means the head moved on: read again."""
        for _ in range(100):
            head = self._head(shard_id)
            refs = select(head)
            if refs is None:
                return head, None
            try:
                parts = self._load_all(shard_id, refs)
            except BlobMissing:
                continue
            self._prune_inline(shard_id, head)
            return head, parts
        raise StorageError(f"shard {shard_id!r}: parts kept vanishing while being read")

    def read_parts(
        self, shard_id: str, *, overlapping_from: int | None, up_to: int | None
    ) -> tuple[ShardState, list[Part]]:
        def select(head: S.Head) -> list[PartRef]:
            refs = list(head.data.parts)
            if overlapping_from is not None:
                refs = [r for r in refs if r.upper is None or r.upper > overlapping_from]
            if up_to is not None:
                refs = [r for r in refs if r.lower <= up_to]
            return refs

        head, parts = self._read(shard_id, select)
        assert parts is not None
        return self._state_of(head), parts

    def part_infos(self, shard_id: str) -> tuple[ShardState, list[PartInfo]]:
        head = self._head(shard_id)
        return self._state_of(head), [
            PartInfo(r.id, r.lower, S.dec(r.upper), r.since, r.count) for r in head.data.parts
        ]

    def load_parts(self, shard_id: str, part_ids: list[int]) -> list[Part] | None:
        wanted = set(part_ids)

        def select(head: S.Head) -> list[PartRef] | None:
            refs = [r for r in head.data.parts if r.id in wanted]
            return refs if len(refs) == len(wanted) else None

        return self._read(shard_id, select)[1]
