"""A session's cursors: `DECLARE c CURSOR FOR query | SUBSCRIBE ...`, `FETCH n c [WITH
(timeout = '1s')]`, `CLOSE c | ALL`.

Contract: `declare` runs the query (a plain query's rows are kept; a SUBSCRIBE keeps its
subscription open); `fetch` returns up to `n` rows — with a timeout, what arrived by then;
without one, as soon as some rows are there (or the stream ended); `close` ends the
subscription (its read holds go). Unknown cursors are `34000`, a duplicate name `42P03`.
A cursor declared without `hold` (inside a transaction, not `WITH HOLD`) is closed by
`end_transaction()`, which the session calls at COMMIT and ROLLBACK, as PostgreSQL does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from twofold.server.portals import Column, Outcome, SessionError, Stream


class Cursors:
    def __init__(self, db: Any,
                 sql: Callable[[str, list[Any]], Awaitable[Any]] | None = None) -> None:
        self.db = db
        self.sql = sql or (lambda text, params: db.sql(text, params or None))
        """Runs the cursor's query (the session's: inside its transaction)."""
        self.open: dict[str, Stream] = {}
        self.transactional: set[str] = set()

    def columns(self, name: str) -> list[Column] | None:
        stream = self.open.get(name)
        return None if stream is None else stream.columns

    async def declare(self, name: str, query: str, params: list[Any],
                      hold: bool = True) -> Outcome:
        if name in self.open:
            raise SessionError(f"cursor \"{name}\" already exists", "42P03")
        o = Outcome.of(query, await self.sql(query, params))
        if o.stream is None and o.columns:  # FETCH's RowDescription says their origins
            from twofold.server.origins import sourced

            o.columns = sourced(self.db, query, o.columns)
        self.open[name] = o.stream if o.stream is not None else \
            Stream.of_rows(o.columns or [], o.rows)
        if not hold:
            self.transactional.add(name)
        return Outcome("DECLARE CURSOR")

    async def end_transaction(self) -> None:
        """COMMIT or ROLLBACK: close the cursors the transaction declared."""
        names, self.transactional = self.transactional, set()
        for name in names:
            stream = self.open.pop(name, None)
            if stream is not None:
                await stream.close()

    async def fetch(self, name: str, count: int | None, timeout: float | None) -> Outcome:
        stream = self.open.get(name)
        if stream is None:
            raise SessionError(f"cursor \"{name}\" does not exist", "34000")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        want = count if count is not None else float("inf")
        while len(stream.pending) < want and not stream.done:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            if deadline is None and stream.pending:
                break  # without a timeout: as soon as some rows are there
            await stream.fill(left)
        n = len(stream.pending) if count is None else min(count, len(stream.pending))
        rows = [stream.pending.popleft() for _ in range(n)]
        return Outcome(f"FETCH {n}", stream.columns, rows)

    async def close(self, name: str) -> Outcome:
        names = list(self.open) if name.lower() == "all" else [name]
        for n in names:
            self.transactional.discard(n)
            stream = self.open.pop(n, None)
            if stream is None:
                raise SessionError(f"cursor \"{n}\" does not exist", "34000")
            await stream.close()
        return Outcome("CLOSE CURSOR")

    def take_streams(self) -> list[Stream]:
        """Forget every cursor; the subscriptions among them, for the caller to close."""
        streams = [s for s in self.open.values() if s.sub is not None]
        self.open.clear()
        self.transactional.clear()
        return streams
