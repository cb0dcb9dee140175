"""Fixtures for storage tests: a storage handle per backend, and a small relation.

Every test taking `storage` or `shared_storage` runs on every backend (`BACKENDS`: memory,
SQLite, PostgreSQL with file blobs, PostgreSQL with S3 blobs); `process_url` is the same for the
backends that several processes can share.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twofold.storage import Storage, open_storage
from twofold.testing.pytest_servers import BACKENDS, Servers

SHARED_BACKENDS = tuple(b for b in BACKENDS if b != "memory")


@pytest.fixture(params=BACKENDS)
def storage(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> Iterator[Storage]:
    with open_storage(servers.storage_url(request.param, tmp_path)) as st:
        yield st


@pytest.fixture(scope="module", params=BACKENDS)
def shared_storage(
    request: pytest.FixtureRequest, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Storage]:
    """One storage per backend for a whole module: property tests use a fresh shard id per
    example instead of a fresh storage."""
    with open_storage(servers.storage_url(request.param, tmp_path_factory.mktemp("shared"))) as st:
        yield st


@pytest.fixture(params=SHARED_BACKENDS)
def process_url(request: pytest.FixtureRequest, servers: Servers, tmp_path: Path) -> str:
    """A fresh storage URL that processes can share (every backend but memory)."""
    return servers.storage_url(request.param, tmp_path)
