"""Stream framing: exact splitting of arbitrary chunkings, oversized headers refused from the
header alone, and the asyncio adapters over real streams."""

import asyncio
import itertools
import struct
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import DecodeError, FrameTooLarge, Status
from twofold.protocol.codec import (
    FrameDecoder,
    decode_response,
    encode,
    frame,
    read_frame,
    write_frame,
)
from twofold.testing.profiles import examples


def header(n: int) -> bytes:
    return struct.pack(">I", n)


def test_frame_is_big_endian_length_then_payload() -> None:
    assert frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert frame(b"") == b"\x00\x00\x00\x00"


@st.composite
def chunked_streams(draw: st.DrawFn) -> tuple[list[bytes], list[bytes]]:
    """Payloads, and their framed concatenation cut at arbitrary points."""
    payloads = draw(st.lists(st.binary(max_size=40), max_size=6))
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    bounds = [0, *cuts, len(stream)]
    return payloads, [stream[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=examples(200))
@given(chunked_streams())
def test_decoder_splits_any_chunking_exactly(case: tuple[list[bytes], list[bytes]]) -> None:
    payloads, chunks = case
    decoder = FrameDecoder()
    out: list[bytes] = []
    for chunk in chunks:
        out.extend(decoder.feed(chunk))
    assert out == payloads
    assert decoder.pending == 0


@given(st.binary(min_size=1, max_size=20), st.integers(0, 3))
def test_partial_frame_stays_pending(payload: bytes, short: int) -> None:
    decoder = FrameDecoder()
    data = frame(payload)
    cut = len(data) - 1 - short if short < len(data) else 0
    assert decoder.feed(data[:cut]) == []
    assert decoder.feed(data[cut:]) == [payload]


def test_oversized_header_is_refused_before_the_payload() -> None:
    decoder = FrameDecoder(max_size=10)
    assert decoder.feed(frame(b"x" * 10)) == [b"x" * 10]
    # Only the header has arrived: the limit applies already.
    with pytest.raises(FrameTooLarge) as info:
        decoder.feed(header(11))
    assert isinstance(info.value, DecodeError)
    assert (info.value.size, info.value.limit) == (11, 10)
    assert "11 bytes" in str(info.value) and "10 bytes" in str(info.value)
    # Nothing was kept for the refused frame.
    assert decoder.pending == 0


def test_decoder_refuses_everything_after_an_oversized_frame() -> None:
    # The refused payload's bytes would otherwise be read as the next header.
    decoder = FrameDecoder(max_size=4)
    with pytest.raises(FrameTooLarge):
        decoder.feed(header(5))
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x00\x00\x00\x01x")


def test_default_limit_is_64_mib() -> None:
    decoder = FrameDecoder()
    assert decoder.max_size == 64 * 1024 * 1024
    with pytest.raises(FrameTooLarge):
        decoder.feed(header(64 * 1024 * 1024 + 1))
    with pytest.raises(FrameTooLarge):
        FrameDecoder().feed(header(0xFFFFFFFF))


def test_header_split_across_feeds() -> None:
    decoder = FrameDecoder(max_size=5)
    assert decoder.feed(b"\x00\x00") == []
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"\x00\x06")


# --- asyncio streams -------------------------------------------------------------------------


def reader_with(data: bytes, *, eof: bool = True) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    if eof:
        reader.feed_eof()
    return reader


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout=10))


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """(server-side reader, client-side writer) over a real loopback socket."""
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()

    async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await accepted.put((r, w))

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client_writer = await asyncio.open_connection("127.0.0.1", port)
    server_reader, server_writer = await accepted.get()
    try:
        yield server_reader, client_writer
    finally:
        client_writer.close()
        server_writer.close()
        server.close()
        await server.wait_closed()


def test_write_then_read_over_tcp() -> None:
    messages = [encode(Status(f"m{i}")) for i in range(20)] + [b""]

    async def main() -> None:
        async with tcp_pair() as (reader, writer):
            for m in messages:
                await write_frame(writer, m)
            writer.close()
            got = []
            while (payload := await read_frame(reader)) is not None:
                got.append(payload)
            assert got == messages
            assert decode_response(got[3]) == Status("m3")

    run(main())


def test_clean_eof_at_frame_boundary_is_none() -> None:
    async def main() -> None:
        assert await read_frame(reader_with(b"")) is None
        reader = reader_with(frame(b"ab"))
        assert await read_frame(reader) == b"ab"
        assert await read_frame(reader) is None

    run(main())


@pytest.mark.parametrize("data", [b"\x00", b"\x00\x00\x00", header(5) + b"abc", header(1)])
def test_eof_mid_frame_raises_incomplete_read(data: bytes) -> None:
    async def main() -> None:
        with pytest.raises(asyncio.IncompleteReadError):
            await read_frame(reader_with(data))

    run(main())


def test_oversized_frame_is_refused_without_reading_the_payload() -> None:
    async def main() -> None:
        # The payload never arrives and the stream stays open: a reader that waited for it
        # would hang (and hit the timeout) instead of refusing from the header.
        reader = reader_with(header(1001) + b"partial", eof=False)
        with pytest.raises(FrameTooLarge):
            await read_frame(reader, max_size=1000)
        # Nothing past the header was consumed.
        assert await reader.readexactly(7) == b"partial"

    run(main())


def test_oversized_frame_over_tcp() -> None:
    async def main() -> None:
        async with tcp_pair() as (reader, writer):
            writer.write(header(2**31))
            await writer.drain()
            with pytest.raises(FrameTooLarge):
                await read_frame(reader)

    run(main())


@given(chunked_streams())
@settings(max_examples=examples(30))
def test_read_frame_over_chunked_feed(case: tuple[list[bytes], list[bytes]]) -> None:
    payloads, chunks = case

    async def main() -> None:
        reader = asyncio.StreamReader()

        async def produce() -> None:
            for c in chunks:
                reader.feed_data(c)
                await asyncio.sleep(0)
            reader.feed_eof()

        task = asyncio.create_task(produce())
        got = []
        while (p := await read_frame(reader)) is not None:
            got.append(p)
        await task
        assert got == payloads

    run(main())


class _Huge(bytes):
    """Claims a length the 4-byte header cannot express, without allocating it."""

    def __len__(self) -> int:
        return 2**32


def test_unframeable_payload_is_refused_before_writing() -> None:
    written: list[bytes] = []

    class Writer:
        def write(self, data: bytes) -> None:
            written.append(data)

        async def drain(self) -> None:
            pass

    with pytest.raises(ValueError, match="cannot be framed"):
        frame(_Huge(b"x"))

    async def main() -> None:
        with pytest.raises(ValueError, match="cannot be framed"):
            await write_frame(Writer(), _Huge(b"x"))  # type: ignore[arg-type]

    run(main())
    assert written == []
