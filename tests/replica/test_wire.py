"""The local link's framing: messages keep their descriptors, in order, however bytes split."""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twofold.protocol import DecodeError, Frontier, GlobalId
from twofold.replica import wire
from twofold.testing.profiles import examples


def _pipe_fd() -> int:
    r, w = os.pipe()
    os.close(w)
    return r


@settings(max_examples=examples(60), deadline=None)
@given(fd_counts=st.lists(st.integers(0, 3), min_size=1, max_size=6),
       cuts=st.lists(st.integers(1, 40), min_size=1, max_size=20))
def test_frames_get_their_own_descriptors_however_the_bytes_split(
        fd_counts: list[int], cuts: list[int]) -> None:
    frames = [wire.pack(wire.HOLD, wire.StandingHold(GlobalId.user(i), Frontier.at(i)), n)
              for i, n in enumerate(fd_counts)]
    fds = [[_pipe_fd() for _ in range(n)] for n in fd_counts]
    stream = b"".join(frames)
    # Descriptors arrive with the first byte of their frame: feed them with that chunk.
    starts, at = [], 0
    for f in frames:
        starts.append(at)
        at += len(f)
    reader = wire.FrameReader()
    got: list[wire.Message] = []
    pos, i, sent_fds = 0, 0, 0
    while pos < len(stream):
        end = min(len(stream), pos + cuts[i % len(cuts)])
        i += 1
        with_chunk = [fd for k, s in enumerate(starts) if pos <= s < end for fd in fds[k]]
        sent_fds += len(with_chunk)
        got.extend(reader.feed(stream[pos:end], with_chunk))
        pos = end
    assert [m.fds for m in got] == fds
    for k, m in enumerate(got):
        hold = wire.unpack(m.kind, m.body)
        assert hold == wire.StandingHold(GlobalId.user(k), Frontier.at(k))
        for fd in m.fds:
            os.close(fd)


def test_descriptors_cross_a_real_socket_with_their_frame() -> None:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with a, b:
        r, w = os.pipe()
        try:
            wire.send_blocking(a, wire.pack(wire.RESET), [])
            wire.send_blocking(a, wire.pack(wire.CLOSED, wire.Closed(GlobalId.user(3), "x"), 1),
                               [r])
            reader = wire.FrameReader()
            msgs: list[wire.Message] = []
            while len(msgs) < 2:
                data, fds = wire.receive(b)
                msgs.extend(reader.feed(data, fds))
            assert [m.kind for m in msgs] == [wire.RESET, wire.CLOSED]
            assert msgs[0].fds == [] and len(msgs[1].fds) == 1
            os.write(w, b"hi")
            assert os.read(msgs[1].fds[0], 2) == b"hi"  # the same pipe, through SCM_RIGHTS
            os.close(msgs[1].fds[0])
        finally:
            os.close(r)
            os.close(w)


def test_a_frame_announcing_missing_descriptors_is_refused() -> None:
    with pytest.raises(DecodeError, match="announces 2 descriptors"):
        wire.FrameReader().feed(wire.pack(wire.RESET, b"", 2), [])


def test_malformed_bodies_are_decode_errors() -> None:
    with pytest.raises(DecodeError, match="malformed"):
        wire.unpack(wire.PUBLISH, b"\x01\x02")
    with pytest.raises(DecodeError, match="no struct"):
        wire.unpack(wire.RESPONSE, b"")
