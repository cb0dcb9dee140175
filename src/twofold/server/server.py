"""The asyncio edge of the pgwire server: sockets, TLS, cancel keys, one `Session` per client.

Contract: `Server(db, auth=..., passwords=..., tls=...)` serves every connection over the one
`AsyncDatabase` (catalog and controller shared); `await server.start(host, port)` listens
(`port=0` picks one: see `server.port`), `await server.close()` stops listening and closes
every connection, stopping its statements and subscriptions. A connection whose messages break
the protocol gets an 08P01 error and is closed; the others are untouched. A client that
disconnects mid-statement has that statement cancelled. A CancelRequest with a session's key
cancels that session's running statement (57014). One connection's handling is `connection.py`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import ssl
from typing import Any

from twofold.server import inbox as inbox_module
from twofold.server.connection import Connection
from twofold.server.inbox import Inbox, InboxProtocol, Turn
from twofold.server.turns import answer_together

log = logging.getLogger(__name__)
READ_CHUNK = 65536


class Server:
    def __init__(self, db: Any, *, auth: str = "trust", passwords: dict[str, str] | None = None,
                 tls: ssl.SSLContext | None = None, turn_batch: int | str | None = "env"
                 ) -> None:
        self.db = db
        self.auth = auth
        self.passwords = passwords or {}
        self.tls = tls
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[Any]] = set()
        self._keys: dict[int, tuple[int, Connection]] = {}
        self._live: set[Connection] = set()
        # The loop's: a turn's received requests answered together, at most `turn_batch` at a
        # time (None: all; 0: each in its own receive) - "env": `TWOFOLD_TURN_BATCH`, else
        # `inbox.TURN_BATCH` (0); see `inbox.Turn`.
        self.turn = Turn(inbox_module.turn_batch() if turn_batch == "env" else
                         None if turn_batch is None else int(turn_batch))
        self.turn.together = lambda inboxes: answer_together(self.turn, inboxes)
        self.closing = False  # close() has begun: sessions end with 57P01
        self.host = ""
        self.port = 0

    def _new_key(self, conn: Connection) -> tuple[int, int]:
        while True:
            pid = secrets.randbelow(2**31 - 1) + 1
            if pid not in self._keys:
                break
        secret = secrets.randbelow(2**31) - 2**30
        self._keys[pid] = (secret, conn)
        return pid, secret

    def _cancel(self, pid: int, secret: int) -> None:
        found = self._keys.get(pid)
        if found is not None and found[0] == secret:
            found[1].cancel()

    async def _client(self, inbox: Inbox, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._conns.add(task)
        conn = Connection(self, inbox, writer)
        self._live.add(conn)
        try:
            await conn.serve()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("a pgwire connection failed")
        finally:
            self._live.discard(conn)
            self._conns.discard(task)

    @property
    def connections(self) -> int:
        return len(self._live)

    def write_buffered(self) -> int:
        """Bytes waiting in the sockets' write buffers (what slow readers cost)."""
        return sum(c.backlog() for c in self._live)

    async def start(self, host: str = "127.0.0.1", port: int = 6875) -> Server:
        loop = asyncio.get_running_loop()
        turn = self.turn

        def protocol() -> InboxProtocol:  # as `asyncio.start_server`'s, reading into an Inbox
            inbox = Inbox(turn)
            return InboxProtocol(inbox, asyncio.StreamReader(limit=READ_CHUNK, loop=loop),
                                 lambda _, writer: self._client(inbox, writer), loop)

        self._server = await loop.create_server(protocol, host, port)
        sock = self._server.sockets[0].getsockname()
        self.host, self.port = sock[0], sock[1]
        return self

    async def close(self) -> None:
        self.closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._conns):
            task.cancel()
        if self._conns:
            await asyncio.wait(list(self._conns), timeout=5)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)

    async def __aenter__(self) -> Server:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
