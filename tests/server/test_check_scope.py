"""The catalog-check scope (`catalog_watch.begin_scope` / `end_scope`, opened per event-loop
iteration by `inbox.Turn.scope`): within a scope one storage probe answers every check on its
thread; outside it (after it, on another thread) each check probes again — so another
process's commit is seen by the first read received after it, and never missed for longer
than the iteration that was already polling when it committed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from twofold.server.inbox import Turn
from twofold.sql import catalog_watch, prepared


def _counted(obj: Any, attr: str) -> list[int]:
    """Replace method `attr` of `obj` by one that counts its calls (in the returned cell)."""
    calls = [0]
    real = getattr(obj, attr)

    def counted() -> Any:
        calls[0] += 1
        return real()

    setattr(obj, attr, counted)
    return calls


@pytest.fixture
def sqlite_db(tmp_path: Any) -> Iterator[tuple[Any, Any, list[int]]]:
    """A SQLite database's core, its catalog watch, and a count of the watch's probes."""
    import twofold

    with twofold.open(f"sqlite:///{tmp_path}/db.sqlite") as db:
        db.sql("CREATE TABLE t (k bigint)")
        adb = db.core
        prepared.refresh_catalog(adb)
        watch = adb.__dict__[prepared._WATCH_ATTR]
        probes = _counted(watch, "_probe")
        try:
            yield adb, watch, probes
        finally:
            catalog_watch.end_scope()


def _commit_elsewhere(path: str) -> None:
    subprocess.run([sys.executable, "-c",
                    "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                    "c.execute('CREATE TABLE IF NOT EXISTS elsewhere (x)'); "
                    "c.execute('INSERT INTO elsewhere VALUES (2)'); c.commit()", path],
                   check=True, timeout=60)


def test_one_probe_answers_a_scopes_checks(sqlite_db: Any) -> None:
    adb, _, probes = sqlite_db
    catalog_watch.begin_scope()
    for _ in range(5):
        prepared.refresh_catalog(adb)
    assert probes[0] == 1
    catalog_watch.end_scope()
    prepared.refresh_catalog(adb)
    prepared.refresh_catalog(adb)
    assert probes[0] == 3  # outside a scope every check probes


def test_a_commit_after_the_scope_is_seen_by_the_next_check(sqlite_db: Any,
                                                            tmp_path: Any) -> None:
    """Another process's commit after the scope's probe is not in its token; the first check
    after the scope closes reads it (the catalog is read again)."""
    adb, _, _ = sqlite_db
    reads = _counted(adb, "_refresh")
    catalog_watch.begin_scope()
    prepared.refresh_catalog(adb)
    _commit_elsewhere(str(tmp_path / "db.sqlite"))
    prepared.refresh_catalog(adb)
    inside = reads[0]
    catalog_watch.end_scope()
    prepared.refresh_catalog(adb)
    assert reads[0] == inside + 1


def test_a_scope_is_its_threads_alone(sqlite_db: Any) -> None:
    adb, _, probes = sqlite_db
    catalog_watch.begin_scope()
    prepared.refresh_catalog(adb)
    assert probes[0] == 1

    def elsewhere() -> None:
        prepared.refresh_catalog(adb)
        prepared.refresh_catalog(adb)

    th = threading.Thread(target=elsewhere)
    th.start()
    th.join()
    assert probes[0] == 3  # the other thread probed for each of its checks
    prepared.refresh_catalog(adb)
    assert probes[0] == 3  # this thread's scope still answers


def test_turn_scope_lasts_one_loop_iteration(sqlite_db: Any) -> None:
    """`Turn.scope` opens a scope that the next iteration closes before its receives run."""
    adb, _, probes = sqlite_db
    seen: list[int] = []

    async def main() -> None:
        turn = Turn()
        assert turn.scope()
        prepared.refresh_catalog(adb)
        prepared.refresh_catalog(adb)
        seen.append(probes[0])
        await asyncio.sleep(0)  # the next iteration: the scope is closed
        prepared.refresh_catalog(adb)
        seen.append(probes[0])
        assert turn.scope()
        turn.unscope()  # closed early: checks probe again
        prepared.refresh_catalog(adb)
        seen.append(probes[0])

    asyncio.run(main())
    assert seen == [1, 2, 3]
