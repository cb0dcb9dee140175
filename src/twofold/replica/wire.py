"""The local link between a replica's front process and its maintenance process.

One Unix stream socket carries, in each direction, frames of the protocol's framing
(`protocol.framing`: a 4-byte length, then the payload). A payload is one **kind** byte, one
byte counting the file descriptors that travel with the frame (`SCM_RIGHTS`, attached to the
frame's first bytes), then the body:

| kind | direction | body |
|---|---|---|
| `C` | front → maintenance | a `ComputeCommand` (the protocol codec) |
| `H` | front → maintenance | `StandingHold`: interactive applied a compaction (I1c) |
| `F` | front → maintenance | `Released`: the front dropped its last view of these buffers |
| `M` | both | `MetricsSync`: one runtime's histograms, for the other's introspection |
| `R` | maintenance → front | a `ComputeResponse` (the protocol codec) |
| `P` | maintenance → front | `Publish`: an index's new snapshot, its batches by reference |
| `X` | maintenance → front | `Closed`: a publication dropped or failed (a tombstone) |
| `Z` | maintenance → front | reset: forget every publication (maintenance saw `Hello`) |
| `I` | maintenance → front | iteration started: maintenance has handled a `Hello` |
| `E` | maintenance → front | the maintenance runtime failed (UTF-8 text); it exits next |

Order is the point: publications, tombstones and resets travel on the stream the responses
travel on, so a `Frontiers` response never overtakes the publication that makes it readable, and
everything before an `I` belongs to the previous protocol iteration.

`FrameReader` is sans-IO: feed it the bytes and descriptors each `recvmsg` returned and it hands
back whole messages, each with its own descriptors. Descriptors arrive no later than the first
byte of their frame, and in order, so a FIFO pairs them with frames exactly.
"""

from __future__ import annotations

import array
import os
import socket
from collections import deque
from typing import Any, Final

import msgspec

from twofold.protocol import DecodeError, Frontier, GlobalId, RelationDesc
from twofold.protocol.codec import encode, value_decoder
from twofold.protocol.framing import HEADER, FrameDecoder

MAX_FDS: Final = 250
"""Descriptors per frame and per `recvmsg` (the kernel's limit is 253). A publication carries one
per new large batch, and a spine holds O(log n) batches, so this is never approached."""

MAX_LOCAL_FRAME: Final = 1 << 31
"""Frames on the local link are trusted; the limit only guards against a corrupt stream."""

COMMAND, HOLD, RELEASED, METRICS, WAKE = b"C", b"H", b"F", b"M", b"W"
"""Front to maintenance; `WAKE` (no body): storage changed in the front's process — poll now
instead of at the next poll interval (the maintenance process cannot see the front's in-process
storage notifier)."""
RESPONSE, PUBLISH, CLOSED, RESET, ITERATION, FAILED = b"R", b"P", b"X", b"Z", b"I", b"E"


class BatchRef(msgspec.Struct, frozen=True):
    """One batch of a published snapshot.

    `buffer` names the batch's bytes for the life of the publication. If the front already holds
    `buffer` in the id's current snapshot, `fd == -1` and `inline is None`: only the description
    (which may have advanced, e.g. a new `upper`) is new. Otherwise the bytes come with this
    message: in the memfd at `fd` (an index into the frame's descriptors) or `inline`. Layout
    (`shm.py`): an Arrow IPC file of `ipc_len` bytes, then `rows` sort codes and `rows` hashes
    (u64) at 64-byte aligned offsets."""

    buffer: int
    lower: int
    upper: int | None
    since: int
    tmin: int
    tmax: int
    rows: int
    ipc_len: int
    fd: int = -1
    inline: bytes | None = None


class Publish(msgspec.Struct, frozen=True):
    id: GlobalId
    desc: RelationDesc
    key: list[int]
    since: Frontier
    upper: Frontier
    data: list[BatchRef]
    errors: list[BatchRef]


class Closed(msgspec.Struct, frozen=True):
    id: GlobalId
    reason: str | None = None


class StandingHold(msgspec.Struct, frozen=True):
    id: GlobalId
    frontier: Frontier


class Released(msgspec.Struct, frozen=True):
    buffers: list[int]


class MetricsSync(msgspec.Struct, frozen=True):
    """One runtime's histograms: full bucket counts, and samples recorded since the last sync."""

    runtime: str
    peek_counts: list[tuple[int, int]]
    step_counts: list[tuple[int, int]]
    peek_recent: list[float]
    step_recent: list[float]


_decoders: Final[dict[bytes, msgspec.msgpack.Decoder[Any]]] = {
    PUBLISH: value_decoder(Publish),
    CLOSED: value_decoder(Closed),
    HOLD: value_decoder(StandingHold),
    RELEASED: value_decoder(Released),
    METRICS: value_decoder(MetricsSync),
}


def pack(kind: bytes, body: bytes | msgspec.Struct = b"", nfds: int = 0) -> bytes:
    """The framed form of one message (its descriptors are sent alongside by the caller)."""
    if nfds > MAX_FDS:
        raise ValueError(f"{nfds} descriptors in one frame (max {MAX_FDS})")
    payload = body if isinstance(body, bytes) else encode(body)
    return HEADER.pack(len(payload) + 2) + kind + bytes((nfds,)) + payload


def unpack(kind: bytes, body: bytes) -> msgspec.Struct:
    """The struct of a `P`/`X`/`H`/`F`/`M` body; `DecodeError` if it is not one."""
    decoder = _decoders.get(kind)
    if decoder is None:
        raise DecodeError(f"no struct for message kind {kind!r}")
    try:
        value: msgspec.Struct = decoder.decode(body)
        return value
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise DecodeError(f"malformed {kind!r} message on the local link: {e}") from None


class Message(msgspec.Struct, frozen=True):
    kind: bytes
    body: bytes
    fds: list[int]


class FrameReader:
    """Bytes and descriptors in, whole `Message`s out (sans-IO). See the module docstring."""

    def __init__(self) -> None:
        self._frames = FrameDecoder(MAX_LOCAL_FRAME)
        self._fds: deque[int] = deque()

    def feed(self, data: bytes, fds: list[int]) -> list[Message]:
        self._fds.extend(fds)
        out: list[Message] = []
        for payload in self._frames.feed(data):
            if len(payload) < 2:
                raise DecodeError("a local-link frame shorter than its header")
            n = payload[1]
            if n > len(self._fds):
                raise DecodeError(f"a frame announces {n} descriptors, {len(self._fds)} arrived")
            out.append(Message(payload[:1], payload[2:], [self._fds.popleft() for _ in range(n)]))
        return out

    def close(self) -> None:
        """Close descriptors that arrived for frames never completed."""
        while self._fds:
            os.close(self._fds.popleft())


def receive(sock: socket.socket, size: int = 1 << 20) -> tuple[bytes, list[int]]:
    """One `recvmsg`: its bytes and the descriptors that came with them (`b""`: end of stream).
    Raises `BlockingIOError` on a non-blocking socket with nothing to read."""
    data, ancdata, flags, _ = sock.recvmsg(size, socket.CMSG_SPACE(MAX_FDS * 4))
    fds: list[int] = []
    for level, type_, payload in ancdata:
        if level == socket.SOL_SOCKET and type_ == socket.SCM_RIGHTS:
            arr = array.array("i")
            arr.frombytes(payload[: len(payload) - len(payload) % arr.itemsize])
            fds.extend(arr)
    if flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise DecodeError("descriptors were truncated on the local link")
    return data, fds


def send_blocking(sock: socket.socket, frame: bytes, fds: list[int]) -> None:
    """Send one frame (and its descriptors, with its first bytes) on a blocking socket."""
    sent = sock.sendmsg([frame], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
                       ) if fds else sock.send(frame)
    if sent < len(frame):
        sock.sendall(memoryview(frame)[sent:])
