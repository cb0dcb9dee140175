"""A read of storage — a subscribe, a copy-to, a one-off query of a table (a peek of its shard)
or over it (a transient dataflow) — chooses its time under a hold of the shards it reads
(`twofold.api.queries`, `twofold.storage.holds.ControllerHolds.hold`), on every storage backend:
a time at or after the since when it was chosen is answered, even if the controller — the
tables' critical reader on PostgreSQL — moves its hold meanwhile, or something advances the
table's since explicitly (memory, SQLite); a time before the since still gets `ReadBeforeSince`.

Each race is made deterministic by a hook at the moment it used to hit, as in
`tests/controller/test_storage_holds.py`: the controller's step (with `retain_history=0` it would
move the since to the last complete time) right before the read reaches the controller, or an
explicit `downgrade_since` right after the time was chosen. Both failed before the hold (the read
at the passed time failed with a since violation)."""

from __future__ import annotations

import contextlib
import csv
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import twofold
from twofold.api.errors import ReadBeforeSince
from twofold.api.session import AsyncDatabase
from twofold.testing.pytest_servers import Servers

pytestmark = pytest.mark.timeout(120)

ROWS = [(1, 10), (2, 20), (3, 30)]
READS = ["select_table", "select_query", "subscribe", "copy_to"]


def read(db: twofold.Database, kind: str, tmp_path: Path, as_of: int | None = None
         ) -> list[tuple[Any, ...]]:
    """The rows of `t` as `kind` reads them (at `as_of`, default now)."""
    t = db.get("t")
    assert isinstance(t, twofold.Table)
    if kind == "select_table":  # a plain table: a peek of its shard
        return sorted(db.query(t, as_of=as_of).rows)
    if kind == "select_query":  # a filter over it: a transient peek dataflow
        return sorted(db.query(t.filter(twofold.col("a") > 0), as_of=as_of).rows)
    if kind == "subscribe":
        with db.subscribe(t, as_of=as_of) as sub:
            batch = sub.next(timeout=20)
            return sorted(r for _, r, d in batch.updates for _ in range(d))
    assert kind == "copy_to"
    path = tmp_path / "out.csv"
    n = db.copy_to(t, path, as_of=as_of)
    with path.open() as f:
        rows = sorted((int(a), int(b)) for a, b in list(csv.reader(f))[1:])
    assert n == len(rows)
    return rows


def parts(db: twofold.Database) -> tuple[AsyncDatabase, Any, Any]:
    core = db.core
    assert core.ticker is not None and core.holds is not None and core.storage is not None
    return core, core.ticker, core.storage.table("t").shard


@contextlib.contextmanager
def opened(backend: str, servers: Servers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
           ) -> Iterator[tuple[twofold.Database, Callable[[], None], Callable[[], None]]]:
    """A database over `t` holding `ROWS`, whose since only the two hooks it yields move:
    the ticker still ticks, but the controller's hold step runs only in them
    (deterministic). `step()` ticks and runs the controller's step (on PostgreSQL it moves the
    critical reader, so the since, past every time chosen before it; on memory/SQLite nothing);
    `advance()` moves the since past every time chosen before it on every backend (the step,
    or on memory/SQLite an explicit `downgrade_since`)."""
    url = servers.storage_url(backend, tmp_path)
    with twofold.open(url, runtimes="one", tick_interval=0.005, retain_history=0.0,
                      timeout=10) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        db.sql("INSERT INTO t VALUES " + ", ".join(map(str, ROWS)))
        core, ticker, shard = parts(db)
        holds = core.holds
        assert holds is not None
        step = holds.step
        monkeypatch.setattr(holds, "step", dict)  # the ticker's thread no longer moves it
        assert ticker.wait_for_ticks(2, timeout=10)  # nor is in a step begun before

        def controller_step() -> None:
            ticker.tick()
            step()  # the controller's critical reader moves to the last complete time

        def advance() -> None:
            ts = ticker.tick()
            if holds.enabled:
                step()
            else:
                shard.downgrade_since(ts)  # memory/SQLite: only an explicit call moves it

        advance()  # since past the insert: a read at the since sees ROWS
        assert shard.since.time is not None and shard.since.time > 0
        yield db, controller_step, advance


def since_of(db: twofold.Database) -> int:
    since: int | None = parts(db)[2].since.time
    assert since is not None
    return since


def once(hook: Callable[[], None]) -> Callable[[], None]:
    done: list[bool] = []

    def run() -> None:
        if not done:
            done.append(True)
            hook()
    return run


kinds = pytest.mark.parametrize("kind", READS)
given = pytest.mark.parametrize("at_since", [False, True], ids=["now", "at-since"])


@kinds
@given
@pytest.mark.parametrize("backend", ["sqlite", "postgres+file"])
def test_a_read_while_the_controller_moves_its_hold_answers(
        backend: str, kind: str, at_since: bool, servers: Servers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(backend, servers, tmp_path, monkeypatch) as (db, step, advance):
        ctl = db.core.controller
        assert ctl is not None
        hook = once(step)  # what the ticker's thread may do just now
        create, peek = ctl.create_dataflow, ctl.peek

        async def racing_create(desc: Any, **kw: Any) -> Any:
            hook()
            return await create(desc, **kw)

        async def racing_peek(target: Any, **kw: Any) -> Any:
            hook()
            return await peek(target, **kw)

        monkeypatch.setattr(ctl, "create_dataflow", racing_create)
        monkeypatch.setattr(ctl, "peek", racing_peek)
        before = since_of(db)
        assert read(db, kind, tmp_path, before if at_since else None) == ROWS
        if db.core.holds is not None and db.core.holds.enabled:
            assert since_of(db) == before  # the hook's step ran, and the hold kept the since
            deadline = time.monotonic() + 10
            while since_of(db) == before and time.monotonic() < deadline:
                advance()  # released (and the read's dataflow dropped): the since moves on
                time.sleep(0.01)
            assert since_of(db) > before


@kinds
@given
@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_a_read_whose_tables_since_passes_its_chosen_time(
        backend: str, kind: str, at_since: bool, servers: Servers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(backend, servers, tmp_path, monkeypatch) as (db, _, advance):
        core = db.core
        choose = core._choose_time
        hook = once(advance)  # someone compacts the table right after the choice

        def racing(rel: Any, as_of: int | None, **kw: Any) -> int:
            chosen = choose(rel, as_of, **kw)
            hook()
            return chosen

        monkeypatch.setattr(core, "_choose_time", racing)
        before = since_of(db)
        if at_since:  # a given time that became illegal: the typed error, not a failure
            with pytest.raises(ReadBeforeSince):
                read(db, kind, tmp_path, before)
        else:  # chosen again, from the new since
            assert read(db, kind, tmp_path) == ROWS
        assert since_of(db) > before


@kinds
@pytest.mark.parametrize("backend", ["sqlite", "postgres+file"])
def test_a_read_before_the_since_is_refused(
        backend: str, kind: str, servers: Servers, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    with opened(backend, servers, tmp_path, monkeypatch) as (db, _, _):
        since = since_of(db)
        with pytest.raises(ReadBeforeSince):
            read(db, kind, tmp_path, since - 1)
        assert read(db, kind, tmp_path, since) == ROWS
