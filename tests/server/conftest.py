"""A pgwire server shared by a module's tests (a fresh in-memory database per module)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from twofold.testing.pgwire import ServerHandle, running_server

_names = itertools.count()


@pytest.fixture(scope="module")
def server() -> Iterator[ServerHandle]:
    with running_server() as handle:
        yield handle


@pytest.fixture
def name() -> str:
    """A table name no other test of the module uses."""
    return f"t{next(_names)}"


@pytest.fixture(scope="session")
def postgres(servers: Any) -> tuple[str, int]:
    """(host, port) of a throwaway PostgreSQL 15 (trust, user and database `postgres`) to
    compare replies with: the session's cluster (`servers`, which the storage and SQL tests
    share; one initdb per session, not two); skipped, saying why, where none can be started."""
    return "127.0.0.1", servers.pg().port
