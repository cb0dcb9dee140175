"""A pgwire server on a thread for tests and benchmarks: `running_server()` yields a
`ServerHandle` (host, port, dsn, the database and its event loop) and stops it on exit;
`handle.asyncpg()` is an asyncpg connection to it whose every wait is bounded."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


@dataclass
class ServerHandle:
    host: str
    port: int
    db: Any
    server: Any
    loop: asyncio.AbstractEventLoop

    def dsn(self, user: str = "twofold", **extra: str) -> str:
        parts = {"host": self.host, "port": str(self.port), "user": user, "dbname": "twofold",
                 **extra}
        return " ".join(f"{k}={v}" for k, v in parts.items())

    def asyncpg(self, timeout: float = 30, **kwargs: Any) -> Any:
        """An asyncpg connection as an async context manager whose every wait is bounded:
        connecting, each command (`command_timeout`) and closing. asyncpg waits forever by
        default — for a reply to a command, and in `close()` for the server to answer
        Terminate — so a test against a server that stopped answering hung past
        pytest-timeout's alarm: the alarm's exception cancelled the test's task, and the
        task's `finally: await conn.close()` then waited forever inside `asyncio.run`."""
        return _asyncpg_connection(self.host, self.port, timeout, kwargs)

    def call(self, coro: Any, timeout: float = 30) -> Any:
        """Run a coroutine on the server's loop and wait for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


@contextlib.asynccontextmanager
async def _asyncpg_connection(host: str, port: int, timeout: float,
                              kwargs: dict[str, Any]) -> AsyncIterator[Any]:
    import asyncpg

    args: dict[str, Any] = {"user": "twofold", "database": "twofold", "timeout": 10,
                            "command_timeout": timeout, **kwargs}
    conn = await asyncpg.connect(host=host, port=port, **args)
    try:
        yield conn
    finally:
        try:
            await conn.close(timeout=min(5.0, timeout))
        except BaseException:
            conn.terminate()
            raise


@contextlib.contextmanager
def running_server(storage: str | None = "memory://", *,
                   introspection_interval: float | None = 0.2,
                   **server_args: Any) -> Iterator[ServerHandle]:
    """A server on a thread over a fresh database (`storage`), whose replicas keep their
    introspection indexes every `introspection_interval` s (the monitoring relations)."""
    from twofold.api.session import AsyncDatabase
    from twofold.server import Server

    started: Future[ServerHandle] = Future()
    stop: list[asyncio.Event] = []

    async def main() -> None:
        try:
            async with AsyncDatabase(storage, timeout=60.0,
                                     introspection_interval=introspection_interval) as db:
                server = await Server(db, **server_args).start("127.0.0.1", 0)
                event = asyncio.Event()
                stop.append(event)
                started.set_result(ServerHandle(server.host, server.port, db, server,
                                                asyncio.get_running_loop()))
                try:
                    await event.wait()
                finally:
                    await server.close()
        except BaseException as e:
            if not started.done():
                started.set_exception(e)
            raise

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True,
                              name="pgwire-test-server")
    thread.start()
    handle = started.result(60)
    try:
        yield handle
    finally:
        handle.loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
