"""Checked writes racing from two OS processes on one SQLite file: compare-and-append at the
upper each read means a row held once is deleted once, and no multiplicity goes negative."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from twofold.api.writes import TableWriter
from twofold.protocol import ColumnType, RelationDesc
from twofold.storage import open_storage, to_tuples

DESC = RelationDesc(["k", "v"], [ColumnType("int", False), ColumnType("int", False)])
ROUNDS = 25
HELD = 3  # copies of each round's row
ASKED = 2  # copies each process deletes per round


def _racer(url: str, barrier: Any, out: Any, key: str | None) -> None:
    storage = open_storage(url)
    try:
        writer = TableWriter(storage.table("t"), "t", (key,) if key else None)
        counts = []
        for r in range(ROUNDS):
            barrier.wait(timeout=60)
            if key:
                counts.append(writer.delete_keys(pl.DataFrame({"k": [r]})).count)
            else:
                rows = pl.DataFrame({"k": [r] * ASKED, "v": [0] * ASKED})
                counts.append(writer.delete_rows(rows).count)
        out.put(counts)
    finally:
        storage.close()


def _race(tmp_path: Path, key: str | None, held: int) -> tuple[Counter[Any], list[list[int]]]:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    with open_storage(url) as storage:
        t = storage.create_table("t", DESC)
        t.insert([[r, 0] for r in range(ROUNDS) for _ in range(held)])
        ctx = mp.get_context("spawn")
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_racer, args=(url, barrier, out, key)) for _ in range(2)]
        for p in procs:
            p.start()
        results = [out.get(timeout=120) for _ in procs]
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        final = Counter({tuple(r): d for r, _, d in to_tuples(t.snapshot())})
    return final, results


def test_two_processes_deleting_the_same_rows_delete_them_once(tmp_path: Path) -> None:
    final, (a, b) = _race(tmp_path, None, HELD)
    # Each round: 2 + 2 copies asked for, 3 held: exactly 3 deleted between the two.
    assert [x + y for x, y in zip(a, b, strict=True)] == [HELD] * ROUNDS
    assert final == Counter()


def test_two_processes_deleting_one_key_delete_it_once(tmp_path: Path) -> None:
    final, (a, b) = _race(tmp_path, "k", 1)
    assert [x + y for x, y in zip(a, b, strict=True)] == [1] * ROUNDS
    assert final == Counter()
