"""`db.lookup` on a database whose interactive runtime runs in this process answers from the
published arrangement at the chosen time (`Controller.peek_now`), sending no peek to either
runtime; when that cannot answer (one runtime, nothing published yet) it peeks as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import twofold


def _forbid_peek(db: Any) -> list[str]:
    calls: list[str] = []
    real = db._ctl.peek

    async def peek(*args: Any, **kwargs: Any) -> Any:
        calls.append("peek")
        return await real(*args, **kwargs)

    db._ctl.peek = peek
    return calls


@pytest.mark.parametrize("storage", ["memory://lookup-now", None], ids=["threads", "processes"])
def test_lookup_is_answered_without_a_peek_once_published(storage: str | None) -> None:
    async def go() -> tuple[list[Any], list[Any], list[str]]:
        async with twofold.open_async(storage, runtimes="two") as db:
            await db.sql("CREATE TABLE t (k bigint, v double precision)")
            await db.sql("INSERT INTO t VALUES (1, 1.5), (2, NULL), (2, -0.0), (3, 3.0)")
            # history kept long enough that the second lookup's time is still readable
            idx = await db.create_index("t_k", db.get("t"), ["k"], retain_history=600.0)
            res = await db.lookup(idx, 2, 9)  # may peek: waits for publication
            first = res.rows
            one_off = (await db.sql("SELECT k, v FROM t WHERE k IN (2, 9)")).rows
            calls = _forbid_peek(db)
            # At a time interactive has published (it answered there): no peek. (At the latest
            # time it may not have published yet — the frontier is maintenance's — and peeks.)
            again = (await db.lookup(idx, 2, 9, as_of=res.timestamp)).rows
            assert sorted(again, key=repr) == sorted(one_off, key=repr)
            return first, again, calls

    first, again, calls = asyncio.run(go())
    assert sorted(first, key=repr) == sorted(again, key=repr)
    assert len(again) == 2
    assert calls == []


def test_lookup_on_one_runtime_still_peeks() -> None:
    async def go() -> tuple[list[Any], list[str]]:
        async with twofold.open_async("memory://lookup-one", runtimes="one") as db:
            await db.sql("CREATE TABLE t (k bigint)")
            await db.sql("INSERT INTO t VALUES (1), (1), (2)")
            idx = await db.create_index("t_k", db.get("t"), ["k"])
            await db.lookup(idx, 1)
            calls = _forbid_peek(db)
            rows = (await db.lookup(idx, 1)).rows
            return rows, calls

    rows, calls = asyncio.run(go())
    assert rows == [(1,), (1,)]
    assert calls == ["peek"]


def test_a_loop_of_answered_lookups_lets_other_tasks_run() -> None:
    """A lookup answered at once still yields a loop turn: a caller looping on lookups does
    not starve the loop's other tasks (its writers, the ticker)."""
    async def go() -> tuple[int, list[str]]:
        async with twofold.open_async("memory://lookup-yield", runtimes="two") as db:
            await db.sql("CREATE TABLE t (k bigint)")
            await db.sql("INSERT INTO t VALUES (1)")
            idx = await db.create_index("t_k", db.get("t"), ["k"], retain_history=600.0)
            res = await db.lookup(idx, 1)
            turns = 0

            async def other() -> None:
                nonlocal turns
                while True:
                    turns += 1
                    await asyncio.sleep(0)

            task = asyncio.create_task(other())
            await asyncio.sleep(0)
            calls = _forbid_peek(db)
            start = turns
            for _ in range(50):
                await db.lookup(idx, 1, as_of=res.timestamp)
            seen = turns - start
            task.cancel()
            return seen, calls

    seen, calls = asyncio.run(go())
    assert calls == []  # answered at once, so only the yield lets `other` run
    assert seen >= 49
