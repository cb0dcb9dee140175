"""The SQL issue's sqllogictest files run over the wire (psycopg 3, simple query protocol),
each against a fresh server: the same records as in-process, through pgwire's text encoding
and SQLSTATEs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest
from tests.sql import slt

from twofold.testing.pgwire import running_server

FILES = sorted((Path(__file__).parents[1] / "sql" / "slt").glob("*.slt"))


class WireEngine:
    name = "twofold"

    def __init__(self) -> None:
        self._server = running_server()
        handle = self._server.__enter__()
        self.conn = psycopg.connect(handle.dsn(), autocommit=True, connect_timeout=10)

    def statement(self, sql: str) -> None:
        self.conn.execute(sql.encode(), prepare=False)

    def query(self, sql: str) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql.encode(), prepare=False).fetchall())

    def sqlstate(self, e: BaseException) -> str | None:
        return getattr(e, "sqlstate", None)

    def close(self) -> None:
        self.conn.close()
        self._server.__exit__(None, None, None)


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_slt_over_the_wire(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(slt.ENGINES, "twofold", WireEngine)
    report = slt.run_file(path, "twofold")
    assert not report.failures, "\n".join(report.failures)
    assert report.passed > 0
