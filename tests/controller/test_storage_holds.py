"""A new dataflow's `as_of` is chosen from a since that is held, on every storage backend
(`twofold.storage.holds`, "Holding before choosing"): a materialized view created while the
controller — the tables' critical reader on PostgreSQL — moves its hold, or while something
advances the table's since explicitly (memory, SQLite), still starts at a time its table can be
read at, so its reads answer instead of timing out (the view's source once failed with
`SinceViolation` and every read of it ended in 57014).

Each race is made deterministic by a hook at the moment it used to hit: the controller's step
(with `retain_history=0`, it would move the since to the last complete time) right before the
dataflow reaches the controller, or an explicit `downgrade_since` right after the as_of was
chosen. Both failed before the hold (the view's reads timed out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.api.test_view_errors import outcome

import twofold
from twofold.api.session import AsyncDatabase
from twofold.protocol import Frontier
from twofold.storage.holds import READER_ID
from twofold.testing.pytest_servers import Servers

pytestmark = pytest.mark.timeout(120)

backends = pytest.mark.parametrize("backend", ["memory", "sqlite", "postgres+file"])


def parts(db: twofold.Database) -> tuple[AsyncDatabase, Any, Any]:
    core = db.core
    assert core.ticker is not None and core.holds is not None and core.storage is not None
    return core, core.ticker, core.storage.table("t").shard


def check_view_reads(db: twofold.Database) -> None:
    """The view runs: its rows, then its own error (not 57014, the timeout), then rows."""
    db.sql("INSERT INTO t VALUES (6, 3)")
    assert outcome(db, "SELECT * FROM v") == ("rows", [(6, 2)])
    db.sql("INSERT INTO t VALUES (1, 0)")
    assert outcome(db, "SELECT * FROM v") == ("error", "22012")
    db.sql("DELETE FROM t WHERE b = 0")
    assert outcome(db, "SELECT * FROM v") == ("rows", [(6, 2)])


@backends
def test_a_view_created_while_the_controller_moves_its_hold_reads(
        backend: str, servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = servers.storage_url(backend, tmp_path)
    with twofold.open(url, runtimes="one", tick_interval=0.005, retain_history=0.0,
                      timeout=10) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        core, ticker, shard = parts(db)
        ctl = core.controller
        assert ctl is not None and core.holds is not None
        holds = core.holds
        original = ctl.create_dataflow
        seen: list[tuple[int, Frontier]] = []

        async def racing(desc: Any, **kw: Any) -> Any:
            if not seen:  # what the ticker's thread may do just now: tick, move the holds
                ts = ticker.tick()
                holds.step()
                seen.append((ts, shard.since))
            return await original(desc, **kw)

        monkeypatch.setattr(ctl, "create_dataflow", racing)
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT a, a / b AS q FROM t")
        monkeypatch.undo()
        view = db.get("v")
        assert isinstance(view, twofold.MaterializedView)
        (ts, since), = seen
        assert since.less_equal(Frontier.at(view.as_of)) and view.as_of < ts, (since, view.as_of)
        check_view_reads(db)
        if holds.enabled:  # the hold went with the create: the controller's reader moves on
            ticker.tick()
            holds.step()
            reader = core.storage.backend.reader(shard.shard_id, READER_ID)  # type: ignore
            assert reader is not None and reader.since is not None and reader.since > view.as_of



@backends
def test_a_view_whose_tables_since_passes_its_chosen_as_of_chooses_again(
        backend: str, servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = servers.storage_url(backend, tmp_path)
    with twofold.open(url, runtimes="one", tick_interval=0.005, timeout=10) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        core, ticker, shard = parts(db)
        original = core._resume_at
        moved: list[Frontier] = []

        def racing(obj: Any, *held: Any) -> Frontier:
            chosen = original(obj, *held)
            if not moved:  # someone compacts the table right after the choice
                moved.append(shard.downgrade_since(ticker.tick()))
            return chosen

        monkeypatch.setattr(core, "_resume_at", racing)
        db.sql("CREATE MATERIALIZED VIEW v AS SELECT a, a / b AS q FROM t")
        monkeypatch.undo()
        view = db.get("v")
        assert isinstance(view, twofold.MaterializedView)
        assert shard.since.less_equal(Frontier.at(view.as_of)), (shard.since, view.as_of)
        check_view_reads(db)
