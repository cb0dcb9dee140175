"""A pytest plugin: throwaway PostgreSQL and S3 servers for the storage backends under test.

Registered by `tests/conftest.py`. The servers start on first use (once per session) and stop
at its end. `storage_url(kind, tmp_path)` gives a fresh storage URL for one of `BACKENDS`:
a fresh memory name, a fresh SQLite file, or a fresh PostgreSQL schema with a fresh blob
directory or S3 prefix. When a server cannot start, the tests needing it skip with the reason,
and the terminal summary says so in a line of its own, so a CI run never skips them silently.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from twofold.testing.pgcluster import PgCluster, S3Server, ServerUnavailable

BACKENDS: Final = ("memory", "sqlite", "postgres+file", "postgres+s3")
"""Every backend the storage semantics are checked on."""

BUCKET: Final = "twofold"

SERVER_NAMES: Final = ("PostgreSQL", "S3 (rclone serve s3)")
"""The servers whose absence skips tests (the skip reason starts `<name> unavailable: `)."""


class Servers:
    """The session's servers, started on demand; `close` stops whatever started."""

    def __init__(self) -> None:
        self._pg: PgCluster | None = None
        self._s3: S3Server | None = None
        self.pg_error: str | None = None
        self.s3_error: str | None = None

    def pg(self) -> PgCluster:
        if self._pg is None and self.pg_error is None:
            try:
                self._pg = PgCluster(fsync=False)
            except ServerUnavailable as e:
                self.pg_error = str(e)
        if self._pg is None:
            self._skip(SERVER_NAMES[0], self.pg_error)
        assert self._pg is not None
        return self._pg

    def s3(self) -> S3Server:
        if self._s3 is None and self.s3_error is None:
            try:
                self._s3 = S3Server((BUCKET,))
                os.environ.update(self._s3.env())
            except ServerUnavailable as e:
                self.s3_error = str(e)
        if self._s3 is None:
            self._skip(SERVER_NAMES[1], self.s3_error)
        assert self._s3 is not None
        return self._s3

    def _skip(self, what: str, why: str | None) -> None:
        pytest.skip(f"{what} unavailable: {why}")

    def storage_url(self, kind: str, tmp_path: Path) -> str:
        """A fresh, empty storage of backend `kind` (one of `BACKENDS`)."""
        fresh = uuid.uuid4().hex[:12]
        if kind == "memory":
            return f"memory://{fresh}"
        if kind == "sqlite":
            return f"sqlite://{tmp_path}/s-{fresh}.db"
        if kind == "postgres+file":
            return f"{self.pg().url}?schema=t_{fresh}&blob=file://{tmp_path}/blobs-{fresh}"
        if kind == "postgres+s3":
            pg = self.pg()
            self.s3()
            return f"{pg.url}?schema=t_{fresh}&blob=s3://{BUCKET}/t-{fresh}"
        raise ValueError(f"unknown backend {kind!r}; expected one of {BACKENDS}")

    def close(self) -> None:
        if self._pg is not None:
            self._pg.close()
            self._pg = None
        if self._s3 is not None:
            self._s3.close()
            self._s3 = None


_SERVERS = Servers()


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    """The session's PostgreSQL and S3 servers (started on first use, stopped at the end)."""
    try:
        yield _SERVERS
    finally:
        _SERVERS.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """One line per unavailable server, counted from the skip reports (not from `_SERVERS`, so
    the line is there too when pytest-xdist's workers ran the tests)."""
    skipped: dict[str, tuple[int, str]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr)
        reason = reason.removeprefix("Skipped: ")
        for what in SERVER_NAMES:
            prefix = f"{what} unavailable: "
            if reason.startswith(prefix):
                count, _ = skipped.get(what, (0, ""))
                skipped[what] = (count + 1, reason.removeprefix(prefix))
    for what, (count, why) in sorted(skipped.items()):
        terminalreporter.write_line(
            f"STORAGE SERVERS: {count} test(s) skipped because {what} is unavailable: {why}",
            red=True, bold=True,
        )
