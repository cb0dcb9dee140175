"""The persist-style backend: PostgreSQL consensus plus write-once blobs.

`postgres://user@host:port/db?blob=file:///dir` (or `blob=s3://bucket/prefix`; optional
`schema=name`, default `twofold`). Any number of processes on any number of machines open the
same URL. Every command reads the shard's head version, computes the next state with a pure
function (`state.py`) and compare-and-sets it as the next version; on a mismatch it reads the new
head and reruns (an append whose `lower` is no longer the upper reports the actual upper).

Writes order their effects so a crash anywhere is harmless: a part larger than `INLINE_BYTES`
is PUT to the blob store under a fresh key *before* the CAS that references it; a writer killed
in between leaks a blob nobody references, which `collect_garbage` deletes once it is older than
its grace period. Smaller parts are inlined: their bytes (one Arrow record batch, without the
schema the shard already has) go into the `parts` table by the same statement as the CAS, and
the state holds only their metadata, so a small append costs one statement that writes a small
state. When `INLINE_RUN` inlined parts collect at the end, the append folds them and its own
updates into one part (the same updates, the same times) and CASes the state that swaps them:
an inlined part while it stays under `INLINE_MERGED` bytes, else a blob; so the number of parts
and the inlined bytes stay bounded however long since stays put. Small blob parts are merged
newest-first, geometrically and without changing any time (`state.plan_tail_merge`), so their
number stays logarithmic too. Compaction
(`replace_parts`) is a CAS too; the blobs it replaces stay until the versions that reference
them are truncated, and a reader that finds a blob gone rereads the head (which no longer
references it) instead of failing.

Reader commands (leased and critical readers holding since) live in `readers.py`, truncation
and garbage collection in `gc.py`, reading parts (and the inlined parts' cache) in `parts.py`;
all three are mixed into `PersistBackend`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import msgspec
import psycopg
import pyarrow as pa

from twofold.protocol import Frontier, RelationDesc
from twofold.storage.backend import Notifier, Part, ShardState
from twofold.storage.encoding import dec_frontier, decode_desc, enc_frontier, encode_desc
from twofold.storage.errors import CorruptStorage, InvalidStorageUrl, StorageError, UnknownShard
from twofold.storage.persist import state as S
from twofold.storage.persist.base import HEADS, UNIQUE, now_ms
from twofold.storage.persist.blob import BlobStore
from twofold.storage.persist.consensus import Consensus, ListeningNotifier
from twofold.storage.persist.gc import GarbageCollection
from twofold.storage.persist.leases import Lease, ListenerLeases
from twofold.storage.persist.parts import PartReads
from twofold.storage.persist.readers import ReaderCommands
from twofold.storage.persist.state import PartRef
from twofold.storage.updates import (
    encode_batch,
    encode_ipc,
    update_schema,
)

INLINE_BYTES: Final = 4096
"""A part this small (encoded) is inlined."""
INLINE_RUN: Final = 16
"""The newest inlined parts are folded into one when this many collect."""
INLINE_MERGED: Final = 16 * 1024
"""A folded part stays inlined up to this size; past it the run goes to a blob."""
INLINE_TOTAL: Final = 64 * 1024
"""The inlined bytes one state may reference."""
MIN_ROW_BYTES: Final = 16
"""An encoded update is at least its time and diff."""
Row = tuple[str, bytes, pa.Table]
"""An inlined part's row of `parts`: its key, its bytes, and the updates they encode (kept in
this handle's cache once the row is committed, so folding it later decodes nothing)."""
MERGE_BELOW: Final = 100_000
"""Blob parts smaller than this (updates) are merged, newest first, geometrically."""
TRUNCATE_EVERY: Final = 64
MAX_ATTEMPTS: Final = 10_000
POLL_INTERVAL: Final = 1.0
"""A listener's safety-net poll: LISTEN/NOTIFY wakes it at once; this only bounds the wait if
a notification is lost while the listening connection reconnects."""


def parse_url(url: str) -> tuple[str, str, str]:
    """`(conninfo, blob_url, schema)` from a `postgres://...?blob=...` URL."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in ("blob", "schema")}
    rest = [(k, v) for k, v in query if k not in ("blob", "schema")]
    blob = ours.get("blob")
    if not blob:
        raise InvalidStorageUrl(
            f"storage URL {url!r}: a PostgreSQL URL needs a blob store, "
            f"?blob=file:///dir or ?blob=s3://bucket/prefix"
        )
    if not parts.netloc or parts.path in ("", "/"):
        raise InvalidStorageUrl(
            f"storage URL {url!r}: expected postgres://user@host:port/database?blob=..."
        )
    conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    return conninfo, blob, ours.get("schema", "twofold")


class PersistBackend(ReaderCommands, GarbageCollection, PartReads):
    """A `Backend` over PostgreSQL consensus and a blob store (see the module docstring)."""

    poll_interval = POLL_INTERVAL

    def __init__(self, url: str, *, retry_timeout: float = 60.0) -> None:
        conninfo, blob_url, schema = parse_url(url)
        self.blobs = BlobStore(blob_url)
        self.consensus = Consensus(conninfo, schema, retry_timeout=retry_timeout)
        self.schema = schema
        self._listening = ListeningNotifier(self.consensus)
        self.notifier: Notifier = self._listening
        self.keep_versions = 64
        self.keep_seconds = 60.0
        self._descs: dict[str, RelationDesc] = {}
        self._schemas: dict[str, pa.Schema] = {}
        self._data_cache: dict[str, tuple[int, S.StateData]] = {}
        self._heads: dict[str, S.Head] = {}  # this handle's last known head, per shard
        self._inline: dict[str, dict[str, pa.Table]] = {}  # inlined parts, decoded, per shard
        self._advances = 0
        self.merge_below = MERGE_BELOW
        self.fault: Callable[[str], None] | None = None  # test hook (see Consensus.fault)
        self.leases = ListenerLeases(self)

    def lease_listener(self, shard_id: str, as_of: int) -> tuple[Lease, Frontier]:
        """Hold `shard_id` at `as_of` for a listener in this process (`leases.py`); returns
        the lease and the since it holds (past `as_of` if the shard was compacted already)."""
        return self.leases.acquire(shard_id, Frontier.at(as_of))

    @property
    def sql_schema(self) -> str:
        return self.schema

    # -- reading state ----------------------------------------------------------------------

    def _head(self, shard_id: str) -> S.Head:
        """The current head version, fresh from consensus (data decoded once per version)."""
        cached = self._data_cache.get(shard_id)
        cached_seqno = cached[0] if cached is not None else -1
        s = self.schema
        # The head by a backward index scan, then its data row only if it is not cached.
        sql = (
            f"SELECT h.seqno, h.upper, h.data_seqno, CASE WHEN h.data_seqno = %(cached)s "
            f"THEN NULL ELSE (SELECT d.data FROM {s}.consensus d WHERE d.shard = %(shard)s "
            f"AND d.seqno = h.data_seqno) END "
            f"FROM (SELECT seqno, upper, data_seqno FROM {s}.consensus WHERE shard = %(shard)s "
            f"ORDER BY seqno DESC LIMIT 1) h"
        )
        def fetch(cur: psycopg.Cursor[Any]) -> Any:
            cur.execute(sql, {"shard": shard_id, "cached": cached_seqno})
            return cur.fetchone()

        row = self.consensus.run(f"reading shard {shard_id!r}", fetch)
        if row is None:
            raise UnknownShard(shard_id)
        seqno, upper, data_seqno, blob = row
        if blob is None and cached is not None and cached[0] == data_seqno:
            data = cached[1]
        else:
            try:
                data = S.decode_state(bytes(blob))
            except (msgspec.DecodeError, TypeError, ValueError) as e:
                raise CorruptStorage(
                    f"shard {shard_id!r}: state version {data_seqno} is unreadable: {e}"
                ) from None
            self._data_cache[shard_id] = (data_seqno, data)
        head = S.Head(seqno, dec_frontier(upper), data_seqno, data)
        self._heads[shard_id] = head
        return head

    def _state_of(self, head: S.Head) -> ShardState:
        return ShardState(head.upper, S.dec(head.data.since))

    # -- the CAS loop -----------------------------------------------------------------------

    def _commit(self, shard_id: str, head: S.Head, upper: Frontier, data: S.StateData | None,
                token: bytes, inline: Row | None = None) -> bool:
        """CAS `head.seqno + 1` with `upper` and (if changed) `data`, inserting the inlined
        part `inline` with it."""
        blob = None if data is None else S.encode_state(data)
        data_seqno = head.data_seqno if data is None else head.seqno + 1
        if self.fault is not None:
            self.fault("before_commit")
        won = self.consensus.cas(shard_id, head.seqno, enc_frontier(upper), blob, data_seqno,
                                 token, None if inline is None else inline[:2],
                                 notify=S.has_listeners(head.data if data is None else data))
        if won:
            if inline is not None:
                self._inline.setdefault(shard_id, {})[inline[0]] = inline[2]
            new = S.Head(head.seqno + 1, upper, data_seqno, head.data if data is None else data)
            self._heads[shard_id] = new
            if data is not None:
                self._data_cache[shard_id] = (data_seqno, data)
            if new.seqno % TRUNCATE_EVERY == 0:
                self._truncate_quietly(shard_id)
        return won

    def _update(self, shard_id: str, command: Callable[[S.Head], S.StateData | None],
                what: str, inline: Row | None = None) -> S.Head:
        """Apply `command` (head -> new data, or `None` for no change) by CAS until it lands;
        `inline` is the row of an inlined part the new data references."""
        token = UNIQUE.token()
        for _ in range(MAX_ATTEMPTS):
            head = self._head(shard_id)
            data = command(head)
            if data is None or data == head.data:
                return head
            if self._commit(shard_id, head, head.upper, data, token, inline):
                return self._heads[shard_id]
        raise StorageError(f"shard {shard_id!r}: {what} lost {MAX_ATTEMPTS} races in a row")

    # -- shards -----------------------------------------------------------------------------

    def create_shard(self, shard_id: str, desc: RelationDesc) -> bool:
        s = self.schema
        initial = S.encode_state(S.StateData())

        def create(cur: psycopg.Cursor[Any]) -> bool:
            with cur.connection.transaction():
                cur.execute(f'INSERT INTO {s}.shards (shard, "desc") VALUES (%s, %s) '
                            f"ON CONFLICT DO NOTHING", (shard_id, encode_desc(desc)))
                if cur.rowcount != 1:
                    return False
                cur.execute(
                    f"INSERT INTO {s}.consensus (shard, seqno, upper, data_seqno, data) "
                    f"VALUES (%s, 1, %s, 1, %s)", (shard_id, enc_frontier(Frontier.minimum()),
                                                    initial))
                return True

        return self.consensus.run(f"creating shard {shard_id!r}", create)

    def describe(self, shard_id: str) -> RelationDesc:
        desc = self._descs.get(shard_id)
        if desc is not None:
            return desc

        def fetch(cur: psycopg.Cursor[Any]) -> Any:
            cur.execute(f'SELECT "desc" FROM {self.schema}.shards WHERE shard = %s', (shard_id,))
            return cur.fetchone()

        row = self.consensus.run(f"reading shard {shard_id!r}", fetch)
        if row is None:
            raise UnknownShard(shard_id)
        desc = decode_desc(bytes(row[0]), shard_id)
        self._descs[shard_id] = desc
        return desc

    def _schema(self, shard_id: str) -> pa.Schema:
        schema = self._schemas.get(shard_id)
        if schema is None:
            schema = self._schemas[shard_id] = update_schema(self.describe(shard_id))
        return schema

    def shard_ids(self) -> list[str]:
        def fetch(cur: psycopg.Cursor[Any]) -> list[str]:
            cur.execute(f"SELECT shard FROM {self.schema}.shards ORDER BY shard")
            return [r[0] for r in cur.fetchall()]

        return self.consensus.run("listing shards", fetch)

    def state(self, shard_id: str) -> ShardState:
        return self._state_of(self._head(shard_id))

    # -- writes -----------------------------------------------------------------------------

    def _stage(self, shard_id: str, updates: pa.Table, lower: int, upper: Frontier,
               since: int) -> tuple[PartRef, Row | None]:
        """Encode a part; PUT it to the blob store unless it is small enough to inline, in
        which case its `parts` row is returned for the CAS to insert."""
        count = updates.num_rows
        if count * MIN_ROW_BYTES <= INLINE_BYTES:  # else it cannot fit: skip encoding it
            data = encode_batch(updates)
            if len(data) <= INLINE_BYTES:
                key = UNIQUE.key()
                return S.PartRef(0, lower, S.enc(upper), since, count, inline=key,
                                 size=len(data)), (key, data, updates)
        key = self.blobs.new_key(shard_id)
        self.blobs.put(key, encode_ipc(updates))
        return S.PartRef(0, lower, S.enc(upper), since, count, key=key), None

    def _fits_inline(self, data: S.StateData, part: PartRef) -> bool:
        if part.inline is None:
            return True
        return (S.inline_suffix_shorter(data, INLINE_RUN)
                and S.inline_bytes(data) + part.size <= INLINE_TOTAL)

    def _folded(self, shard_id: str, data: S.StateData, part: PartRef, updates: pa.Table
                ) -> tuple[S.StateData, PartRef, Row | None]:
        """When the newest inlined parts are many (or too big): the state with them and this
        append folded into one part holding the same updates at the same times — inlined (its
        row returned for the CAS) while small enough, else a blob, PUT here."""
        suffix = S.inline_suffix(data)
        tables = [p.updates for p in self._load_all(shard_id, suffix)] + [updates]
        merged = pa.concat_tables(tables)
        lower = suffix[0].lower if suffix else part.lower
        rest = S.inline_bytes(data) - sum(p.size for p in suffix)
        encoded = (encode_batch(merged) if merged.num_rows * MIN_ROW_BYTES <= INLINE_MERGED
                   else None)
        if encoded is not None and len(encoded) <= INLINE_MERGED \
                and rest + len(encoded) <= INLINE_TOTAL:
            key = UNIQUE.key()
            ref = S.PartRef(0, lower, part.upper, 0, merged.num_rows, inline=key,
                            size=len(encoded))
            return S.spill(data, suffix, ref), ref, (key, encoded, merged)
        key = self.blobs.new_key(shard_id)
        self.blobs.put(key, encode_ipc(merged))
        ref = S.PartRef(0, lower, part.upper, 0, merged.num_rows, key=key)
        return S.spill(data, suffix, ref), ref, None

    def compare_and_append(
        self, shard_id: str, lower: Frontier, new_upper: Frontier, updates: pa.Table | None
    ) -> Frontier | None:
        part: PartRef | None = None
        inline: Row | None = None
        if updates is not None and updates.num_rows and lower.time is not None:
            part, inline = self._stage(shard_id, updates, lower.time, new_upper, 0)
        token = UNIQUE.token()
        head = self._heads.get(shard_id)  # optimistic: our own last head is usually current
        for _ in range(MAX_ATTEMPTS):
            if head is None or head.upper != lower:
                head = self._head(shard_id)
                if head.upper != lower:
                    self._discard(part)
                    part = None
                    return head.upper
            data = None
            spilled: PartRef | None = None
            row: Row | None = None
            if part is not None:
                if self._fits_inline(head.data, part):
                    data, row = S.append_part(head.data, part), inline
                else:
                    assert updates is not None
                    data, spilled, row = self._folded(shard_id, head.data, part, updates)
            if self._commit(shard_id, head, new_upper, data, token, row):
                added_blob = (spilled is not None and spilled.key is not None) or (
                    part is not None and part.key is not None)
                part = None
                if spilled is not None:  # the folded parts' cached updates are garbage now
                    self._prune_inline(shard_id, self._heads[shard_id])
                self.notifier.notify(shard_id)
                if added_blob:
                    self._merge_tail(shard_id)
                return None
            self._discard(spilled)
            head = None
        # Any exception above leaves a blob PUT for this append to `collect_garbage`: if an
        # uncertain CAS landed after all, the blob is referenced and must stay.
        raise StorageError(f"shard {shard_id!r}: append lost {MAX_ATTEMPTS} races in a row")

    def _merge_tail(self, shard_id: str) -> None:
        """Merge the newest small blob parts (`state.plan_tail_merge`) by one CAS; abandoned,
        changing nothing, if the parts changed meanwhile. Best effort: an error leaves the
        parts as they were (the merged blob, if PUT, is collected as a leak)."""
        with contextlib.suppress(StorageError):
            plan = S.plan_tail_merge(self._head(shard_id).data, self.merge_below)
            if not plan:
                return
            parts = self.load_parts(shard_id, [p.id for p in plan])
            if parts is None:
                return
            merged = pa.concat_tables([p.updates for p in parts])
            new = Part(0, plan[0].lower, S.dec(plan[-1].upper), 0, merged.num_rows, merged)
            self.replace_parts(shard_id, [p.id for p in plan], new, truncate=False)

    def _discard(self, part: PartRef | None) -> None:
        if part is not None and part.key is not None:
            with contextlib.suppress(StorageError):
                self.blobs.delete([part.key])

    def advance_uppers(self, shard_ids: list[str], upper: Frontier) -> None:
        """Advance each shard's upper to `upper` where it is below, in one statement per round
        (not a CAS per shard): each advanced shard gets an upper-only version."""
        if not shard_ids or upper.time is None:
            return
        s = self.schema
        sql = (
            f"WITH heads AS ({HEADS.format(s=s)}), "
            f"todo AS (SELECT h.shard, h.seqno, h.data_seqno FROM heads h "
            f"JOIN {s}.consensus c ON c.shard = h.shard AND c.seqno = h.seqno "
            f"WHERE h.upper < %(upper)s FOR KEY SHARE OF c) "
            f"INSERT INTO {s}.consensus (shard, seqno, upper, data_seqno) "
            f"SELECT shard, seqno + 1, %(upper)s, data_seqno FROM todo "
            f"ON CONFLICT DO NOTHING RETURNING shard"
        )
        check = (
            f"SELECT shard FROM ({HEADS.format(s=s)}) h WHERE h.upper < %(upper)s"
        )
        target = enc_frontier(upper)
        pending = list(shard_ids)
        self._advances += 1
        if self._advances % TRUNCATE_EVERY == 0:
            self._truncate_upper_only(pending)

        def round_(cur: psycopg.Cursor[Any]) -> list[str]:
            cur.execute(sql, {"shards": pending, "upper": target})
            advanced = [r[0] for r in cur.fetchall()]
            for shard_id in advanced:
                self.notifier.notify(shard_id)
            if advanced:  # other processes' listeners (see `Consensus.notify`)
                cur.execute(f"SELECT pg_notify('{self.consensus.channel}', s) "
                            f"FROM unnest(%s::text[]) s", (advanced,))
            cur.execute(check, {"shards": pending, "upper": target})
            return [r[0] for r in cur.fetchall()]

        for _ in range(MAX_ATTEMPTS):
            # Idempotent: it only ever raises uppers to `upper`, so a retried round is safe.
            pending = self.consensus.run("advancing uppers", round_)
            if not pending:
                return
        raise StorageError(f"advancing uppers of {pending} lost {MAX_ATTEMPTS} races in a row")

    def downgrade_since(self, shard_id: str, since: Frontier) -> Frontier:
        head = self._update(shard_id, lambda h: S.downgrade_since(h.data, since, now_ms()),
                            "downgrading since")
        self.notifier.notify(shard_id)
        return S.dec(head.data.since)

    def replace_parts(self, shard_id: str, old: list[int], new: Part, *,
                      truncate: bool = True) -> bool:
        if not old:
            return False
        ref, inline = (self._stage(shard_id, new.updates, new.lower, new.upper, new.since)
                       if new.count else (None, None))
        outcome = {"ok": False}

        def command(head: S.Head) -> S.StateData | None:
            data = S.replace_parts(head.data, old, ref)
            outcome["ok"] = data is not None
            return data

        head = self._update(shard_id, command, "compaction", inline)
        if not outcome["ok"]:
            self._discard(ref)
            return False
        self._prune_inline(shard_id, head)
        if truncate:
            self._truncate_quietly(shard_id)
        return True

    def notify(self, shard_id: str) -> None:
        self.notifier.notify(shard_id)

    def close(self) -> None:
        self.leases.close()
        self._listening.stop()
        self.consensus.close()
