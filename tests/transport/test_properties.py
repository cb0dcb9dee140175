"""Property: however the byte stream is split, the target receives exactly the commands sent,
whole and in order, and the controller the responses, in order."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import (
    AllowCompaction,
    CancelPeek,
    ComputeCommand,
    Frontier,
    GlobalId,
    IndexTarget,
    InitializationComplete,
    Peek,
    PeekResponse,
    PeekRows,
    Schedule,
)
from twofold.protocol.codec import decode_response, encode
from twofold.protocol.framing import FrameDecoder, frame
from twofold.testing.profiles import examples
from twofold.transport import ReplicaServer

from .support import EchoReplica, async_test, hello, raw_connection, within

ids = st.integers(min_value=0, max_value=1000).map(GlobalId.user)
commands: st.SearchStrategy[ComputeCommand] = st.one_of(
    st.builds(
        Peek,
        uuid=st.uuids(),
        target=ids.map(IndexTarget),
        timestamp=st.integers(min_value=0, max_value=2**62),
    ),
    st.builds(CancelPeek, uuid=st.uuids()),
    st.builds(Schedule, id=ids),
    st.builds(
        AllowCompaction,
        id=ids,
        frontier=st.one_of(st.just(Frontier.empty()), st.integers(0, 2**40).map(Frontier.at)),
    ),
    st.just(InitializationComplete()),
)


@settings(max_examples=examples(30))
@given(
    sent=st.lists(commands, max_size=40),
    cuts=st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=20),
)
def test_commands_arrive_whole_and_in_order_however_the_stream_is_split(
    sent: list[ComputeCommand], cuts: list[int]
) -> None:
    first = hello()
    stream = b"".join(frame(encode(c)) for c in [first, *sent])
    peeks = [c for c in sent if isinstance(c, Peek)]

    @async_test
    async def scenario() -> None:
        replica = EchoReplica()
        async with ReplicaServer(replica) as server:
            reader, writer = await raw_connection(server)
            offset, i = 0, 0
            while offset < len(stream):
                size = cuts[i % len(cuts)]
                writer.write(stream[offset : offset + size])
                await writer.drain()
                offset, i = offset + size, i + 1
            await replica.wait_commands(1 + len(sent))
            assert replica.commands == [first, *sent]

            decoder = FrameDecoder()
            responses: list[object] = []
            while len(responses) < len(peeks):
                chunk = await within(reader.read(65536))
                assert chunk, "the server closed the connection"
                responses += [decode_response(p) for p in decoder.feed(chunk)]
            assert responses == [
                PeekResponse(p.uuid, PeekRows([([p.timestamp], 1)])) for p in peeks
            ]
            writer.close()

    scenario()
