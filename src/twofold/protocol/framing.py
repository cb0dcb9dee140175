"""Stream framing: each message is a 4-byte big-endian unsigned length, then the payload.

`FrameDecoder` is sans-IO (feed bytes, get whole payloads); `read_frame` / `write_frame` adapt it
to asyncio streams. A frame whose header announces more than the limit is refused from the header
alone, before any buffer for it is allocated.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Final

from twofold.protocol.errors import FrameTooLarge

HEADER: Final = struct.Struct(">I")
DEFAULT_MAX_FRAME: Final = 64 * 1024 * 1024


def _header(payload: bytes) -> bytes:
    if len(payload) > 0xFFFFFFFF:
        raise ValueError(f"payload of {len(payload)} bytes cannot be framed (max 4 GiB - 1)")
    return HEADER.pack(len(payload))


def frame(payload: bytes) -> bytes:
    """The framed form of one payload."""
    return _header(payload) + payload


class FrameDecoder:
    """Incremental frame splitter: `feed(data)` returns the payloads completed by `data`."""

    def __init__(self, max_size: int = DEFAULT_MAX_FRAME) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._need: int | None = None
        self._error: FrameTooLarge | None = None

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads completed by `data`, in order. After a `FrameTooLarge` the stream has
        lost its frame boundaries, so every later `feed` raises the same error."""
        if self._error is not None:
            raise self._error
        self._buf += data
        out: list[bytes] = []
        while True:
            if self._need is None:
                if len(self._buf) < HEADER.size:
                    return out
                (size,) = HEADER.unpack_from(self._buf)
                if size > self.max_size:
                    self._buf.clear()
                    self._error = FrameTooLarge(size, self.max_size)
                    raise self._error
                del self._buf[: HEADER.size]
                self._need = size
            if len(self._buf) < self._need:
                return out
            out.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = None

    @property
    def pending(self) -> int:
        """Bytes buffered towards an incomplete frame."""
        return len(self._buf)


async def read_frame(
    reader: asyncio.StreamReader, max_size: int = DEFAULT_MAX_FRAME
) -> bytes | None:
    """Read one payload; `None` on a clean end of stream at a frame boundary.

    Raises `FrameTooLarge` for an oversized header (nothing is read past it) and
    `asyncio.IncompleteReadError` for a stream that ends mid-frame.
    """
    try:
        header = await reader.readexactly(HEADER.size)
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            return None
        raise
    (size,) = HEADER.unpack(header)
    if size > max_size:
        raise FrameTooLarge(size, max_size)
    return await reader.readexactly(size)


async def write_frame(writer: asyncio.StreamWriter, payload: bytes) -> None:
    """Write one framed payload and wait for the transport to drain. A payload too large for
    the 4-byte header raises `ValueError` before anything is written."""
    writer.write(_header(payload))
    writer.write(payload)
    await writer.drain()
