"""`TWOFOLD_LAG_TRACE` (`replica/lagtrace.py`): with it set, the maintenance process and the
front each record an index's frontier reports — found/stepped/sent in the child, read and taken
by the multiplexer in the front — on one clock, the step's end before the front's read (the
child's "sent" stamp may trail the front's read: the write returns after the front has it);
without it, tracing is off."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.runtime.helpers import KV, Driver, sqlite_url

from twofold.replica import Replica
from twofold.replica.lagtrace import ENV, LagTrace
from twofold.storage import open_storage

pytestmark = pytest.mark.timeout(120)


def _lines(directory: Path) -> list[list[str]]:
    return [
        line.split("\t") for p in sorted(directory.iterdir()) for line in p.read_text().splitlines()
    ]


def test_off_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV, raising=False)
    trace = LagTrace("front")
    assert not trace.on
    trace.frontier("a", object())  # a no-op, not an error
    trace.close()


async def test_frontier_reports_are_traced_across_the_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, str(tmp_path))
    url = sqlite_url("lagtrace")
    storage = open_storage(url)
    t = storage.create_table("t", KV)
    t.insert([[1, "a"]])
    replica = Replica(url, "two", placement="processes", poll_interval=0.005)
    try:
        d = Driver(await replica.start())
        await d.start()
        _, idx = await d.index_on_table(t)
        await d.frontier_reaches(idx, t.upper)
        t.insert([[2, "b"]])
        await d.frontier_reaches(idx, t.upper)
        upper = t.upper.time
    finally:
        await replica.close()
        storage.close()
    lines = _lines(tmp_path)
    by_tag: dict[str, dict[int, list[float]]] = {"m": {}, "a": {}, "t": {}}
    for tag, gid, up, *times in lines:
        if gid == str(idx) and up != "None":
            by_tag[tag][int(up)] = [float(x) for x in times]
    assert upper in by_tag["m"] and upper in by_tag["a"] and upper in by_tag["t"], by_tag
    polled, stepped, sent = by_tag["m"][upper]
    read, taken = by_tag["a"][upper][0], by_tag["t"][upper][0]
    # `sent` is stamped when the child's write returns; the front may already have read the
    # frames by then (CI saw the read 0.2 ms before it), so only the step's end precedes both.
    assert polled <= stepped <= sent
    assert stepped <= read <= taken
