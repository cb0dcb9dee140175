"""A `serve_replica` on a thread of its own (its own event loop), for API tests that drive a
replica over TCP without paying a subprocess's start-up: `start()` returns its `host:port`,
`stop()` ends it the way a crash would look to the client (the socket closes)."""

from __future__ import annotations

import asyncio
import ssl as _ssl
import threading
from concurrent.futures import Future

from twofold.replica import serve_replica


class ThreadReplica:
    def __init__(self, storage_url: str, *, token: str | None = None,
                 ssl: _ssl.SSLContext | None = None, port: int = 0) -> None:  # fmt: skip
        self.storage_url = storage_url
        self.token = token
        self.ssl = ssl
        self.port = port
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._task: asyncio.Task[int] | None = None

    def start(self, timeout: float = 30.0) -> str:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="test-replica")  # fmt: skip
        self._thread.start()
        address: Future[tuple[str, int]] = Future()

        async def run() -> int:
            ready: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()
            ready.add_done_callback(lambda f: address.set_result(f.result()))
            return await serve_replica(self.storage_url, port=self.port, runtimes="one",
                                       token=self.token, ssl=self.ssl, ready=ready)  # fmt: skip

        def begin() -> None:
            self._task = asyncio.ensure_future(run())
            self._task.add_done_callback(
                lambda t: None if address.done() or t.cancelled()
                else address.set_exception(t.exception() or RuntimeError("ended")))  # fmt: skip

        self._loop.call_soon_threadsafe(begin)
        host, port = address.result(timeout)
        self.port = port
        return f"{host}:{port}"

    def stop(self) -> None:
        loop, task = self._loop, self._task
        if loop is None:
            return
        if task is not None:
            loop.call_soon_threadsafe(task.cancel)

            async def wait() -> None:
                await asyncio.wait([task])

            asyncio.run_coroutine_threadsafe(wait(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        assert self._thread is not None
        self._thread.join(30)
        loop.close()
        self._loop = self._task = None

    def __enter__(self) -> ThreadReplica:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
