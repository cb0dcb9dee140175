"""SQLite's `read_parts(overlapping_from=t)` reads no part that ends by `t`: a listener whose
shard's upper moved on by empty appends (the ticker) polls without reading the data it has
already delivered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twofold.protocol import Frontier
from twofold.storage import open_storage
from twofold.storage.sqlite import SqliteBackend

from .helpers import DESC


def test_a_part_that_ends_before_the_start_is_not_read(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    with open_storage(f"sqlite:///{tmp_path}/parts.db") as storage:
        shard = storage.create_shard("s", DESC)
        shard.compare_and_append([([1, "a"], 0, 1), ([2, "b"], 2, 1)], 0, 3)
        backend = storage.backend
        assert isinstance(backend, SqliteBackend)
        backend.advance_uppers(["s"], Frontier.at(10))  # as the ticker does
        shard.compare_and_append([([3, "c"], 11, 1)], 10, 12)
        decoded: list[int] = []
        real = SqliteBackend._part

        def part(self: SqliteBackend, shard_id: str, row: Any) -> Any:
            decoded.append(row[0])
            return real(self, shard_id, row)

        monkeypatch.setattr(SqliteBackend, "_part", part)
        state, parts = backend.read_parts("s", overlapping_from=5, up_to=None)
        assert state.upper == Frontier.at(12)
        assert [(p.lower, p.upper) for p in parts] == [(10, Frontier.at(12))]
        assert len(decoded) == 1  # the part [0, 3) is not read
        _, parts = backend.read_parts("s", overlapping_from=2, up_to=None)
        assert [p.lower for p in parts] == [0, 10]  # one that ends after the start is
        _, parts = backend.read_parts("s", overlapping_from=3, up_to=None)
        assert [p.lower for p in parts] == [10]
