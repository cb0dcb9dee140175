"""A dataflow that cannot be built answers for every export, on every placement, and the
replica serves on (`spec/protocol.md` §5, `twofold.runtime.dataflows`).

A `CreateDataflow` whose plan the engine refuses, or whose building raises, is kept as failed
on the replica. Its readers get the spec's answers at once: a peek of an index export
`PeekError`, a subscribe one `SubscribeBatch(error=...)` closing it, a copy-to `CopyToError`,
and a materialized view holds the failure as its error (its shard's reads fail with it; its
frontiers advance as a running view's would). Before, the last three got nothing when the
failure came at build (their sink states were never made), so a controller — in process or
over TCP — waited for good; and a build that raised ended the runtime, and with it the whole
replica (a `twofold replica` process exited). Every placement: in process and over TCP, one
runtime, and two with maintenance in its own process (over TCP: a `twofold replica` process,
which forks its maintenance process, so the build patch below reaches it). Last, the same
through the API: the user's reads fail at once with a typed error naming the failure.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from tests.runtime.helpers import (
    KV,
    Driver,
    complete_time,
    index_import,
    rows_of,
    sqlite_url,
    table,
)
from tests.runtime.helpers import replica as runtime_replica

import twofold
import twofold.runtime.dataflows as hosting
from twofold.protocol import (
    AllowWrites,
    BuildDesc,
    Call,
    Column,
    CopyToError,
    CopyToSink,
    CreateDataflow,
    DataflowDescription,
    Frontier,
    Get,
    GlobalId,
    IndexDesc,
    MaterializedViewSink,
    Mfp,
    Peek,
    PeekError,
    RelationDesc,
    Schedule,
    SinkDesc,
    SourceImport,
    StorageTarget,
    SubscribeBatch,
    SubscribeSink,
)
from twofold.protocol import Literal as Lit
from twofold.sql.errors import sqlstate_of
from twofold.storage import Storage, Table, open_storage
from twofold.testing.helpers import multiset
from twofold.transport import connect

pytestmark = pytest.mark.timeout(120)

Placement = tuple[Literal["inproc", "tcp"], Literal["one", "procs"]]
PLACEMENTS: list[Placement] = [("inproc", "one"), ("tcp", "one"), ("tcp", "procs"),
                               ("inproc", "procs")]
placements = pytest.mark.parametrize("placement", PLACEMENTS, ids=["-".join(p) for p in PLACEMENTS])

ANSWER = 10.0
"""Seconds an answer may take (prompt: the timeouts it replaces were a minute)."""

TYPE_ERROR = Call("add", [Column(1), Lit(1)])  # str + int: the engine's type check refuses it
OUT = RelationDesc(["k", "v", "x"], [*KV.types, KV.types[0]])


RAISING_BUILD = """
import twofold
import twofold.runtime.dataflows as hosting
original = hosting.Dataflow
def building(desc, **kw):
    if "raises" in desc.debug_name:
        raise KeyError("boom while building")  # a bug, not an invalid plan
    return original(desc, **kw)
hosting.Dataflow = building
"""
"""Makes building every dataflow whose name has `raises` raise (`exec`uted in this process, or in a
`twofold replica` process before its CLI runs: its forked maintenance process inherits it)."""


@contextlib.asynccontextmanager
async def replica(placement: Placement, patch: str = "") -> AsyncIterator[tuple[Driver, Storage]]:
    """A replica of `placement` over fresh SQLite storage, and a `Driver` on it. Over TCP with
    two runtimes it is a `twofold replica` process (which forks its maintenance process)."""
    transport, mode = placement
    url = sqlite_url(f"build-{mode}")
    if placement == ("tcp", "procs"):
        storage = open_storage(url)
        try:
            with cli_replica(url, patch) as (host, port):
                conn = await connect(host, port)
                try:
                    yield Driver(conn), storage
                finally:
                    await conn.aclose()
        finally:
            storage.close()
        return
    assert not patch or mode == "one", "a patch reaches only runtimes in this process"
    exec(patch, {})  # the fixed text above; the monkeypatch fixture undoes it
    async with runtime_replica(mode, transport, url) as got:
        yield got


@contextlib.contextmanager
def cli_replica(url: str, patch: str, runtimes: str = "two") -> Iterator[tuple[str, int]]:
    """A `twofold replica` process over `url`, running `patch` first; its address."""
    code = patch + "\nfrom twofold.cli.main import main\nmain()\n"
    cmd = [sys.executable, "-c", code, "replica", "--listen", "127.0.0.1:0", "--storage", url,
           "--runtimes", runtimes, "--log-level", "ERROR"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = ""
        while not line.startswith("listening on "):
            line = proc.stdout.readline()
            assert line, "twofold replica ended before listening"
        host, _, port = line.removeprefix("listening on ").strip().rpartition(":")
        yield host, int(port)
        assert proc.poll() is None, "the replica process died"
    finally:
        proc.kill()
        proc.wait()


def bad(name: str, t: Table, ts: int, **exports: Any) -> DataflowDescription:
    """A dataflow over `t` whose one built object the engine refuses."""
    src, mid = exports.pop("src"), exports.pop("mid")
    return DataflowDescription(
        name, source_imports={src: SourceImport(t.shard.shard_id, t.desc)},
        objects_to_build=[BuildDesc(mid, Mfp(input=Get(src), map=[TYPE_ERROR]))],
        as_of=Frontier.at(ts), **exports)


async def every_export_answers(d: Driver, storage: Storage, t: Table, ts: int, why: str,
                               name: str, tmp_path: Path) -> None:
    """One failing dataflow per export kind (named `name`-...); each answers with `why`."""
    ids = {k: (d.next_id(), d.next_id(GlobalId.transient)) for k in ("i", "s", "c", "v")}
    idx, sub, cp, mv = (d.next_id(), d.next_id(GlobalId.transient),
                        d.next_id(GlobalId.transient), d.next_id())
    shard = f"mv/{name}-{uuid.uuid4().hex[:8]}"
    storage.create_shard(shard, OUT)
    mid = {k: m for k, (_, m) in ids.items()}
    src = {k: s for k, (s, _) in ids.items()}
    await d.send(
        CreateDataflow(bad(f"{name}-index", t, ts, src=src["i"], mid=mid["i"],
                           index_exports={idx: (IndexDesc(mid["i"], [0]), OUT)})),
        Schedule(idx),
        CreateDataflow(bad(f"{name}-subscribe", t, ts, src=src["s"], mid=mid["s"],
                           sink_exports={sub: SinkDesc(mid["s"], OUT, SubscribeSink())})),
        Schedule(sub),
        CreateDataflow(bad(f"{name}-copy", t, ts, src=src["c"], mid=mid["c"],
                           until=Frontier.at(ts + 1), sink_exports={cp: SinkDesc(
                               mid["c"], OUT, CopyToSink(str(tmp_path / f"{name}.csv"),
                                                         "csv"))})),
        Schedule(cp),
        CreateDataflow(bad(f"{name}-view", t, ts, src=src["v"], mid=mid["v"],
                           sink_exports={mv: SinkDesc(mid["v"], OUT,
                                                      MaterializedViewSink(shard))})),
        Schedule(mv), AllowWrites(mv))
    peeked = await d.peek(idx, ts, timeout=ANSWER)
    assert isinstance(peeked, PeekError) and why in peeked.message, peeked
    await d.until(lambda: bool(d.check.subscribes.get(sub)), "the subscribe's answer", ANSWER)
    (ended,) = d.check.subscribes[sub]
    assert isinstance(ended.event, SubscribeBatch) and ended.event.upper == Frontier.empty()
    assert ended.event.error is not None and why in ended.event.error, ended
    await d.until(lambda: bool(d.check.copy_tos.get(cp)), "the copy-to's answer", ANSWER)
    copied = d.check.copy_tos[cp][0].result
    assert isinstance(copied, CopyToError) and why in copied.message, copied
    assert not (tmp_path / f"{name}.csv").exists()
    # The view holds the failure as its error: it reports progress, and reads of it fail.
    await d.until(lambda: (d.check.last(mv) or Frontier.minimum()).less_equal(
        Frontier.at(ts)) is False, "the view's frontier past its as_of", ANSWER)
    u = uuid.uuid4()
    await d.send(Peek(u, StorageTarget(d.next_id(GlobalId.transient), shard), ts))
    read = await d.result(u, ANSWER)
    assert isinstance(read, PeekError) and why in read.message, read


async def serves_on(d: Driver, t: Table, ts: int) -> None:
    _, good = await d.index_on_table(t, as_of=ts)
    assert multiset(rows_of(await d.peek(good, ts, timeout=ANSWER))) == {(1, "a"): 1}
    assert not d.ended


@placements
async def test_a_dataflow_the_engine_refuses_answers_for_every_export(
        placement: Placement, tmp_path: Path) -> None:
    async with replica(placement) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        await every_export_answers(d, storage, t, ts, "argument 0 is str", "refused", tmp_path)
        await serves_on(d, t, ts)


@pytest.mark.parametrize("placement", PLACEMENTS[:3], ids=["-".join(p) for p in PLACEMENTS[:3]])
async def test_a_dataflow_whose_building_raises_answers_and_the_replica_serves_on(
        placement: Placement, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # In process the patch goes through `monkeypatch`, which undoes it; a replica process
    # runs it before its CLI. (In process with two runtimes, maintenance is spawned: a patch
    # cannot reach it, and the refused-plan test covers that placement.)
    monkeypatch.setattr(hosting, "Dataflow", hosting.Dataflow)  # type: ignore[attr-defined]
    async with replica(placement, RAISING_BUILD) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        await every_export_answers(d, storage, t, ts, "KeyError: 'boom while building'",
                                   "raises", tmp_path)
        await serves_on(d, t, ts)


@pytest.mark.parametrize("runtimes", ["one", "two"])
def test_the_user_gets_a_typed_error_from_a_replica_that_cannot_build(
        runtimes: str, tmp_path: Path) -> None:
    """Through the API, against `twofold replica` over TCP (two runtimes: maintenance in a
    forked process): reads of a view or index whose dataflow cannot be built fail with the
    failure (SQLSTATE XX000, naming it), not a timeout (57014); everything else serves."""
    path = tmp_path / "shop.db"
    url = f"sqlite:///{path}"
    open_storage(url).close()
    with cli_replica(url, RAISING_BUILD, runtimes) as (host, port), \
            twofold.open(str(path), replicas=[f"{host}:{port}"], tick_interval=0.01,
                         timeout=30) as db:
        db.sql("CREATE TABLE t (a int, b int)")
        db.sql("INSERT INTO t VALUES (6, 3)")
        good = db.create_index("good", db.table("t"), key="a")
        db.sql("CREATE MATERIALIZED VIEW raises_view AS SELECT a, a / b AS q FROM t")
        for query in ("SELECT * FROM raises_view", "SELECT q FROM raises_view WHERE a = 6"):
            with pytest.raises(twofold.TwofoldError) as e:
                db.sql(query)
            assert sqlstate_of(e.value) == "XX000", e.value
            assert "boom while building" in str(e.value), e.value
        with db.sql("SUBSCRIBE TO raises_view") as sub, pytest.raises(twofold.TwofoldError) as e:
            for _ in sub:
                pass
        assert "boom while building" in str(e.value), e.value
        index = db.create_index("raises_index", db.table("t"), key="a")
        with pytest.raises(twofold.QueryFailed, match="boom while building"):
            index.lookup(6)
        db.sql("INSERT INTO t VALUES (8, 4)")
        assert good.lookup(8).rows == [(8, 4)]
        assert sorted(db.sql("SELECT * FROM t").rows) == [(6, 3), (8, 4)]


@placements
async def test_what_reads_a_failed_index_fails_with_it(placement: Placement) -> None:
    """A dataflow importing a failed index would never be scheduled (the index never advances
    past its as_of): it fails at once, naming the index, and answers like one that failed."""
    async with replica(placement) as (d, storage):
        t = table(storage, [[1, "a"]])
        ts = complete_time(t)
        await d.start()
        src, mid, failed = d.next_id(), d.next_id(GlobalId.transient), d.next_id()
        await d.send(CreateDataflow(bad("refused-index", t, ts, src=src, mid=mid,
                                        index_exports={failed: (IndexDesc(mid, [0]), OUT)})),
                     Schedule(failed))
        over, sub = d.next_id(), d.next_id(GlobalId.transient)
        imports = {failed: index_import(failed, OUT)}
        await d.send(
            CreateDataflow(DataflowDescription(
                "over-failed", index_imports=imports,
                index_exports={over: (IndexDesc(failed, [0]), OUT)}, as_of=Frontier.at(ts))),
            CreateDataflow(DataflowDescription(
                "subscribe-over-failed", index_imports=imports,
                sink_exports={sub: SinkDesc(failed, OUT, SubscribeSink())},
                as_of=Frontier.at(ts))))  # no Schedule: a controller sends none (above)
        peeked = await d.peek(over, ts, timeout=ANSWER)
        assert isinstance(peeked, PeekError), peeked
        assert f"imported index {failed} failed" in peeked.message, peeked
        assert "argument 0 is str" in peeked.message, peeked
        await d.until(lambda: bool(d.check.subscribes.get(sub)), "the subscribe's answer", ANSWER)
        (ended,) = d.check.subscribes[sub]
        assert isinstance(ended.event, SubscribeBatch) and ended.event.error is not None
        assert f"imported index {failed} failed" in ended.event.error, ended
        await serves_on(d, t, ts)
