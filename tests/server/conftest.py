"""A pgwire server shared by a module's tests (a fresh in-memory database per module)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

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
