"""A table write's storage error reaches the user as what it is (`api/objects.py`, `_run`): rows
the storage refuses are `InvalidRows`; a table dropped underneath is `UnknownObject`; a storage
that fails (corrupt, closed, a read before its since, ...) is a `TwofoldError` saying the storage
failed — never `InvalidRows`, which would tell the user to fix rows that were fine."""

from __future__ import annotations

from typing import Any

import pytest

import twofold
from twofold.api.errors import InvalidRows, TwofoldError, UnknownObject
from twofold.protocol import Frontier
from twofold.storage.errors import CorruptStorage, InvalidUpdates, SinceViolation, UnknownShard


def _raising(exc: Exception) -> Any:
    def write(*args: object, **kwargs: object) -> Any:
        raise exc

    return write


@pytest.mark.parametrize(
    ("raised", "expected", "not_expected"),
    [
        (InvalidUpdates("a bad row"), InvalidRows, None),
        (UnknownShard("table/t"), UnknownObject, InvalidRows),
        (CorruptStorage("torn page"), TwofoldError, InvalidRows),
        (SinceViolation("cannot read at 0, before since", shard_id="table/t", as_of=0,
                        since=Frontier.at(5), upper=Frontier.at(6)), TwofoldError, InvalidRows),
    ],
)
def test_a_write_s_storage_error_is_typed_by_its_cause(
    monkeypatch: pytest.MonkeyPatch, raised: Exception, expected: type[Exception],
    not_expected: type[Exception] | None,
) -> None:
    with twofold.open() as db:
        t = db.create_table("t", {"k": int, "v": str})
        t.insert([(1, "a")])
        monkeypatch.setattr(t._table, "insert", _raising(raised))
        with pytest.raises(expected) as info:
            t.insert([(2, "b")])
        if not_expected is not None:
            assert not isinstance(info.value, not_expected), info.value
        assert info.value.__cause__ is raised
        monkeypatch.undo()
        assert sorted(t.collect().rows) == [(1, "a")]  # nothing half-written
