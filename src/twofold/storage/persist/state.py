"""The consensus state of one shard, and the pure commands that advance it.

A shard's state is a sequence of versions `1, 2, ...` in the consensus table. Each version has an
`upper` of its own and refers (`data_seqno`) to the version holding its `StateData`: the parts,
`since`, and readers. An append of updates or any change of `since`, parts or readers writes a
new `StateData`; an append that only advances the upper (the ticker, an empty batch) writes a
version whose `data_seqno` is its predecessor's, so it costs a few bytes, not a copy of the state.

Every command here is a pure function from the state it read to the state it proposes; the
backend CASes the proposal as version `seqno + 1` and, on a mismatch, reads the new head and
reruns the command. Nothing here does IO.

Readers hold the shard back. The shard's `since` never passes the meet of the sinces of its
live readers: *critical* readers (the controller) until they move themselves, *leased* readers
(listeners in any process) until their lease (renewed by heartbeats) runs out, after which any
command drops them. Critical readers also *drive* since: while one is registered, since follows
the meet of all live readers as they move. Leased readers only hold it back: a listener's
progress alone never releases history someone else may still need (without a critical reader,
since moves only by an explicit `downgrade_since`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from twofold.protocol import Frontier

TimeOrEmpty = int | None  # a frontier on the wire: its time, or None for the empty frontier


def enc(frontier: Frontier) -> TimeOrEmpty:
    return frontier.time


def dec(value: TimeOrEmpty) -> Frontier:
    return Frontier.empty() if value is None else Frontier.at(value)


class PartRef(msgspec.Struct, frozen=True, array_like=True):
    """A stored part: the key of a write-once blob, or (small parts) the key of its row in the
    consensus database's `parts` table (`inline`, `size` bytes), written by the same statement
    as the version that first references it. Only metadata lives in the state, so the state
    each compare-and-set writes stays a few dozen bytes per part."""

    id: int
    lower: int
    upper: TimeOrEmpty
    since: int
    count: int
    key: str | None = None
    inline: str | None = None
    size: int = 0


class ReaderState(msgspec.Struct, frozen=True, array_like=True):
    """A registered reader: its since, the version it last saw, and its lease (ms)."""

    since: TimeOrEmpty
    seqno: int
    critical: bool
    lease_ms: int
    heartbeat_ms: int
    token: str = ""


class StateData(msgspec.Struct, frozen=True):
    since: TimeOrEmpty = 0
    parts: tuple[PartRef, ...] = ()
    next_part_id: int = 1
    readers: dict[str, ReaderState] = {}


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(StateData)


def encode_state(data: StateData) -> bytes:
    return _ENCODER.encode(data)


def decode_state(blob: bytes) -> StateData:
    return _DECODER.decode(blob)


@dataclass(frozen=True, slots=True)
class Head:
    """A version of a shard's state as read from consensus."""

    seqno: int
    upper: Frontier
    data_seqno: int
    data: StateData = field(default_factory=StateData)


def keys_of(data: StateData) -> set[str]:
    """The blob keys `data` references."""
    return {p.key for p in data.parts if p.key is not None}


def inline_keys_of(data: StateData) -> set[str]:
    """The keys of the inlined parts (rows of the `parts` table) `data` references."""
    return {p.inline for p in data.parts if p.inline is not None}


def inline_bytes(data: StateData) -> int:
    return sum([p.size for p in data.parts if p.inline is not None])


def append_part(data: StateData, part: PartRef) -> StateData:
    """The state with `part` (its id replaced by a fresh one) appended at the end."""
    new = msgspec.structs.replace(part, id=data.next_part_id)
    return msgspec.structs.replace(data, parts=(*data.parts, new),
                                   next_part_id=data.next_part_id + 1)


def replace_parts(data: StateData, old: list[int], new: PartRef | None) -> StateData | None:
    """The state with the adjacent parts `old` replaced by `new` (dropped if `None`), or
    `None` if any of them is gone."""
    wanted = set(old)
    positions = [i for i, p in enumerate(data.parts) if p.id in wanted]
    if not positions or len(positions) != len(wanted):
        return None
    first, last = positions[0], positions[-1]
    kept: tuple[PartRef, ...] = ()
    next_id = data.next_part_id
    if new is not None:
        kept = (msgspec.structs.replace(new, id=next_id),)
        next_id += 1
    return msgspec.structs.replace(
        data, parts=data.parts[:first] + kept + data.parts[last + 1:], next_part_id=next_id
    )


def inline_suffix(data: StateData) -> list[PartRef]:
    """The newest run of inlined, never-compacted parts (adjacent in time, so they can be
    spilled into one blob part without changing any update)."""
    k = len(data.parts)
    while k > 0 and data.parts[k - 1].inline is not None and data.parts[k - 1].since == 0:
        k -= 1
    return list(data.parts[k:])


def inline_suffix_shorter(data: StateData, limit: int) -> bool:
    """`len(inline_suffix(data)) < limit`, looking at no more than `limit` parts."""
    parts = data.parts
    for k in range(1, limit + 1):
        if k > len(parts) or parts[-k].inline is None or parts[-k].since != 0:
            return True
    return False


def spill(data: StateData, suffix: list[PartRef], merged: PartRef) -> StateData:
    """The state with the parts `suffix` (the newest ones) and a new append replaced by
    `merged`, one part holding all their updates."""
    if not suffix:
        return append_part(data, merged)
    out = replace_parts(data, [p.id for p in suffix], merged)
    assert out is not None, "the suffix was read from this state"
    return out


def plan_tail_merge(data: StateData, below: int, factor: int = 2) -> list[PartRef]:
    """The newest blob parts worth merging into one (empty: none), without changing any time.

    A spine over the never-compacted blob parts smaller than `below` updates: the newest part
    absorbs its predecessors while each is at most `factor` times the run so far, so sizes fall
    geometrically towards the newest part, their number is logarithmic, and each update is
    rewritten a logarithmic number of times before its part reaches `below` and stays put.
    This bounds the state of a shard whose since never moves (nothing compacts it).
    """
    run: list[PartRef] = []
    total = 0
    for part in reversed(data.parts):
        if part.key is None or part.since != 0 or part.count >= below:
            break
        if run and part.count > factor * total:
            break
        run.append(part)
        total += part.count
        if total >= below:
            break
    return run[::-1] if len(run) >= 2 else []


def has_listeners(data: StateData) -> bool:
    """Whether a leased reader holds the shard: a listener, here or in another process, that
    may be waiting to be woken when a version lands (critical readers never wait)."""
    return any(not r.critical for r in data.readers.values())


def live_readers(data: StateData, now_ms: int) -> dict[str, ReaderState]:
    """The readers whose lease has not run out (critical readers never expire)."""
    return {
        rid: r for rid, r in data.readers.items()
        if r.critical or r.heartbeat_ms + r.lease_ms > now_ms
    }


def readers_meet(readers: dict[str, ReaderState]) -> Frontier:
    """The meet of the readers' sinces (the empty frontier if there are none)."""
    out = Frontier.empty()
    for r in readers.values():
        out = out.meet(dec(r.since))
    return out


def downgrade_since(data: StateData, requested: Frontier, now_ms: int) -> StateData:
    """Advance since towards `requested`, never past a live reader and never backwards; expired
    readers are dropped."""
    readers = live_readers(data, now_ms)
    since = dec(data.since).join(requested.meet(readers_meet(readers)))
    if enc(since) == data.since and len(readers) == len(data.readers):
        return data
    return msgspec.structs.replace(data, since=enc(since), readers=readers)


def with_readers(data: StateData, readers: dict[str, ReaderState]) -> StateData:
    """The state with exactly `readers` (live ones); since then advances to their meet if one
    of them is critical (see the module docstring), and never moves backwards."""
    since = dec(data.since)
    if any(r.critical for r in readers.values()):
        since = since.join(readers_meet(readers))
    return msgspec.structs.replace(data, readers=readers, since=enc(since))


def with_reader(data: StateData, reader_id: str, reader: ReaderState | None,
                now_ms: int) -> StateData:
    """The state with `reader_id` set to `reader` (removed if `None`) and expired readers
    dropped (`with_readers`)."""
    readers = live_readers(data, now_ms)
    readers.pop(reader_id, None)
    if reader is not None:
        readers[reader_id] = reader
    return with_readers(data, readers)


def renew_readers(data: StateData, sinces: dict[str, TimeOrEmpty], seqno: int,
                  now_ms: int) -> tuple[StateData, list[str]]:
    """A heartbeat: renew the leases of the live readers among `sinces`, moving each one's
    since forward to the given value (never backwards); expired readers are dropped. Returns
    the state and the ids in `sinces` that had already expired (their holds are gone)."""
    live = live_readers(data, now_ms)
    lost = [r for r in sinces if r not in live]
    for rid, since in sinces.items():
        reader = live.get(rid)
        if reader is not None:
            held = dec(reader.since).join(dec(since))
            live[rid] = msgspec.structs.replace(reader, since=enc(held), heartbeat_ms=now_ms,
                                                seqno=seqno)
    return with_readers(data, live), lost
