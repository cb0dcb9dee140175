"""Garbage collection: truncating old versions and deleting the blobs nobody can read.

A version is truncated once it is at least `keep_versions` behind the head and `keep_seconds`
old (so an uncertain compare-and-set can still be resolved by reading its successor) and no live
leased reader still holds it; the head's data version is always kept. Blobs referenced only by
truncated versions (parts that compaction or merging replaced) are deleted right after, and so
are the `parts` rows of inlined parts only they referenced.
`collect_garbage` also lists the blob store and deletes blobs no version references that are
older than a grace period: parts PUT by writers that died before their compare-and-set.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from twofold.storage.errors import StorageError
from twofold.storage.persist import state as S
from twofold.storage.persist.base import HEADS, Core, now_ms


class GarbageCollection:
    """The collecting commands of `PersistBackend` (a mixin over `base.Core`)."""

    def _truncate_upper_only(self: Core, shard_ids: list[str]) -> None:
        """Delete old upper-only versions of many shards in one statement (they reference no
        blob, so nothing else needs collecting)."""
        s = self.schema
        sql = (
            f"WITH heads AS ({HEADS.format(s=s)}) "
            f"DELETE FROM {s}.consensus c USING heads h WHERE c.shard = h.shard "
            f"AND c.seqno < h.seqno - %(keep)s AND c.data IS NULL "
            f"AND c.created < now() - %(age)s"
        )
        params = {"shards": shard_ids, "keep": self.keep_versions,
                  "age": timedelta(seconds=self.keep_seconds)}
        with contextlib.suppress(StorageError):
            self.consensus.run("truncating uppers", lambda cur: cur.execute(sql, params))

    def _truncate_quietly(self: Core, shard_id: str) -> None:
        with contextlib.suppress(StorageError):
            self.truncate(shard_id)

    def truncate(self: Core, shard_id: str) -> tuple[int, int]:
        """Delete versions no one can need (see the module docstring) and the blobs only they
        referenced; return `(versions, blobs)` deleted."""
        head = self._head(shard_id)
        readers = S.live_readers(head.data, now_ms())
        cut = head.seqno - self.keep_versions
        for r in readers.values():
            if not r.critical:
                cut = min(cut, r.seqno)
        if cut <= 1:
            return 0, 0
        s = self.schema

        def delete(cur: psycopg.Cursor[Any]) -> tuple[int, list[bytes], list[bytes]]:
            cur.execute(
                f"DELETE FROM {s}.consensus WHERE shard = %(shard)s AND seqno < %(cut)s "
                f"AND seqno <> %(keep)s AND created < now() - %(age)s RETURNING data",
                {"shard": shard_id, "cut": cut, "keep": head.data_seqno,
                 "age": timedelta(seconds=self.keep_seconds)})
            deleted = cur.fetchall()
            gone = [bytes(r[0]) for r in deleted if r[0] is not None]
            kept: list[bytes] = []
            if gone:
                cur.execute(f"SELECT data FROM {s}.consensus WHERE shard = %s "
                            f"AND data IS NOT NULL", (shard_id,))
                kept = [bytes(r[0]) for r in cur.fetchall()]
            return len(deleted), gone, kept

        count, gone, kept = self.consensus.run(f"truncating shard {shard_id!r}", delete)
        dead: set[str] = set()
        dead_inline: set[str] = set()
        for blob in gone:
            data = S.decode_state(blob)
            dead |= S.keys_of(data)
            dead_inline |= S.inline_keys_of(data)
        for blob in kept:
            data = S.decode_state(blob)
            dead -= S.keys_of(data)
            dead_inline -= S.inline_keys_of(data)
        if dead_inline:
            self.consensus.run(f"truncating shard {shard_id!r} parts", lambda cur: cur.execute(
                f"DELETE FROM {s}.parts WHERE shard = %s AND key = ANY(%s)",
                (shard_id, sorted(dead_inline))))
        self.blobs.delete(sorted(dead))
        return count, len(dead)

    def collect_garbage(self: Core, *, grace_seconds: float = 600.0) -> dict[str, int]:
        """Truncate every shard, then delete blobs that no retained version references and that
        are older than `grace_seconds` (parts of writers that died between PUT and CAS; the
        grace keeps an append in flight from losing its part)."""
        versions = blobs = 0
        for shard_id in self.shard_ids():
            v, b = self.truncate(shard_id)
            versions += v
            blobs += b

        def fetch(cur: psycopg.Cursor[Any]) -> list[bytes]:
            cur.execute(f"SELECT data FROM {self.schema}.consensus WHERE data IS NOT NULL")
            return [bytes(r[0]) for r in cur.fetchall()]

        referenced: set[str] = set()
        for blob in self.consensus.run("collecting garbage", fetch):
            referenced |= S.keys_of(S.decode_state(blob))
        cutoff = datetime.now(UTC) - timedelta(seconds=grace_seconds)
        leaked = [k for k, modified in self.blobs.list()
                  if k not in referenced and modified < cutoff]
        self.blobs.delete(leaked)
        return {"versions": versions, "blobs": blobs, "leaked": len(leaked)}
