"""The timestamp oracle in the consensus database, shared by every process and machine.

One row per oracle name; `write_ts` is a single statement,
`UPDATE ... SET ts = GREATEST(ts + 1, now, at_least) RETURNING ts`, so timestamps are strictly
increasing across all writers however their clocks disagree, and never go backwards when one
steps back. `now` comes from the caller's clock (milliseconds since the epoch by default), so
timestamps still track wall time.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Any

import psycopg

from twofold.protocol import MAX_TIME
from twofold.storage.oracle import TimestampOracle, wall_clock_ms
from twofold.storage.persist.consensus import Consensus


class PgTimestampOracle(TimestampOracle):
    """A `TimestampOracle` whose state is a row of the consensus database."""

    def __init__(self, consensus: Consensus, clock: Callable[[], int] = wall_clock_ms,
                 name: str = "default") -> None:
        super().__init__(clock)
        self._consensus = consensus
        self._name = name
        s = consensus.schema
        self._write = (f"UPDATE {s}.oracle SET ts = GREATEST(ts + 1, %(now)s, %(at_least)s) "
                       f"WHERE name = %(name)s RETURNING ts")
        self._read = f"SELECT ts FROM {s}.oracle WHERE name = %(name)s"
        self._observe = (f"UPDATE {s}.oracle SET ts = GREATEST(ts, %(t)s) WHERE name = %(name)s")

        def create(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(f"INSERT INTO {s}.oracle VALUES (%s, -1) ON CONFLICT DO NOTHING",
                        (name,))

        consensus.run("creating the timestamp oracle", create)

    def _one(self, sql: str, params: dict[str, Any], what: str) -> int:
        def fetch(cur: psycopg.Cursor[Any]) -> Any:
            cur.execute(sql, params)
            return cur.fetchone()

        row = self._consensus.run(what, fetch)
        return int(row[0]) if row is not None else -1

    def write_ts(self, *, at_least: int = 0) -> int:
        t = self._one(self._write, {"now": Decimal(self._clock()), "at_least": Decimal(at_least),
                                    "name": self._name}, "taking a write timestamp")
        if t > MAX_TIME:
            raise OverflowError("the timestamp oracle has exhausted the 64-bit time domain")
        return t

    def read_ts(self) -> int:
        return max(self._one(self._read, {"name": self._name}, "reading the oracle"), 0)

    def observe(self, t: int) -> None:
        def run(cur: psycopg.Cursor[Any]) -> None:
            cur.execute(self._observe, {"t": Decimal(t), "name": self._name})

        self._consensus.run("advancing the oracle", run)
