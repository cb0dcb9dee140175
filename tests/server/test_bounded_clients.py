"""The test suite's asyncpg connections (`ServerHandle.asyncpg()`) bound every wait: against a
server that accepts a connection and then stops answering, a command fails with a timeout and
the connection closes, where asyncpg's defaults wait forever — in the command, and again in
`close()` while pytest-timeout's alarm cancels the test (so the alarm seemed not to fire:
`tests/server` stalled that way in a full run)."""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time

import pytest

from twofold.testing.pgwire import ServerHandle


def _mute_server() -> tuple[socket.socket, int]:
    """Answers the startup like PostgreSQL, then reads and never replies."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()

    def status(k: bytes, v: bytes) -> bytes:
        return b"S" + struct.pack("!i", 6 + len(k) + len(v)) + k + b"\0" + v + b"\0"

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"R" + struct.pack("!ii", 8, 0) + status(b"server_version", b"15.0") +
                     status(b"client_encoding", b"UTF8") + b"K" + struct.pack("!iii", 12, 1, 2)
                     + b"Z" + struct.pack("!i", 5) + b"I")
        with conn:
            while conn.recv(65536):
                pass

    threading.Thread(target=serve, daemon=True).start()
    return listener, listener.getsockname()[1]


def test_a_mute_server_fails_the_command_and_the_close_is_bounded() -> None:
    listener, port = _mute_server()
    handle = ServerHandle("127.0.0.1", port, None, None, asyncio.new_event_loop())

    async def run() -> None:
        async with handle.asyncpg(timeout=1, ssl=False) as conn:
            await conn.prepare("SELECT 1")

    start = time.monotonic()
    with pytest.raises(TimeoutError):
        asyncio.run(run())
    assert time.monotonic() - start < 20
    handle.loop.close()
    listener.close()
