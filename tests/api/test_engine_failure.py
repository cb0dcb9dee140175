"""An index whose dataflow raises an engine error (a bug, not the data) on every step: its
reads fail promptly with `ObjectFailed` naming it and the error — never a `QueryTimeout` — and
the rest of the database keeps serving (`docs/errors.md`). The bug is simulated by patching the
distinct operator to raise."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

import twofold
from twofold.engine.operator import Delta
from twofold.engine.reduce import DistinctOp
from twofold.protocol import GlobalId


def broken_distinct(self: DistinctOp, t: int, inputs: Mapping[GlobalId, Delta]) -> Delta:
    raise IndexError("boom in distinct")


def test_an_index_failing_in_the_engine_fails_its_reads_and_the_rest_serves(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DistinctOp, "step", broken_distinct)
    # timeout=30: before, every read waited for it and ended in QueryTimeout.
    with twofold.open("memory://", tick_interval=0.01, timeout=30) as db:
        t = db.create_table("t", {"k": int, "v": str})
        t.insert([(1, "a"), (2, "b")])
        good = db.create_index("good", t, key="k")
        assert good.lookup(1).rows == [(1, "a")]
        bad = db.create_index("bad", t.distinct(), key="k")
        with pytest.raises(twofold.ObjectFailed, match=r"index bad.*IndexError: boom") as e:
            bad.lookup(1)
        assert isinstance(e.value, twofold.QueryFailed)
        with pytest.raises(twofold.ObjectFailed, match="index bad"):  # later reads: at once
            bad.lookup(2)
        # A one-off query hitting the same bug fails the same way (its peek dataflow does).
        with pytest.raises(twofold.ObjectFailed, match="IndexError: boom in distinct"):
            db.query(t.distinct())
        # Everything else serves, writes included.
        assert good.lookup(2).rows == [(2, "b")]
        t.insert([(3, "c")])
        assert good.lookup(3).rows == [(3, "c")]
        assert sorted(db.query(t).rows) == [(1, "a"), (2, "b"), (3, "c")]
