"""Fixtures for storage tests: a storage handle per backend, and a small relation."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from twofold.storage import Storage, open_storage

from .helpers import fresh_id


@pytest.fixture(params=["memory", "sqlite"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    url = f"memory://{fresh_id()}" if request.param == "memory" else f"sqlite://{tmp_path}/s.db"
    with open_storage(url) as st:
        yield st


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def shared_storage(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Storage]:
    """One storage per backend for a whole module: property tests use a fresh shard id per
    example instead of a fresh storage."""
    if request.param == "memory":
        url = f"memory://{fresh_id()}"
    else:
        url = f"sqlite://{tmp_path_factory.mktemp('shared')}/s.db"
    with open_storage(url) as st:
        yield st
