"""A fake in-process replica for controller tests.

It speaks the protocol over `channel_pair`: answers peeks from an in-memory dict (or holds them
until told to answer), reports frontiers for created indexes, reports empty frontiers after a
drop, answers copy-tos, and lets a test send subscribe batches by hand. Failures are injected by
refusing connections, closing the connection, or failing it with an exception. Tests wait on
`until(predicate)`, which is re-checked after every command the replica handles.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from uuid import UUID

from twofold.client import ComputeClient, ReplicaEndpoint, channel_pair
from twofold.protocol import (
    AllowCompaction,
    AllowWrites,
    CancelPeek,
    ComputeCommand,
    ComputeResponse,
    Constant,
    CopyToResponse,
    CopyToRowCount,
    CreateDataflow,
    CreateInstance,
    Frontier,
    Frontiers,
    GlobalId,
    Hello,
    IdKind,
    IndexTarget,
    Peek,
    PeekCanceled,
    PeekResponse,
    PeekRows,
    Row,
    Schedule,
)
from twofold.testing.helpers import WAIT, until

E = Frontier.empty()


@dataclass
class Session:
    """One connection (one protocol iteration) of the fake replica."""

    endpoint: ReplicaEndpoint
    commands: list[ComputeCommand] = field(default_factory=list)
    pending: dict[UUID, Peek] = field(default_factory=dict)
    nonce: UUID | None = None
    created: set[GlobalId] = field(default_factory=set)
    peek_uuids: set[UUID] = field(default_factory=set)
    indexes: set[GlobalId] = field(default_factory=set)
    alive: bool = True

    def send(self, response: ComputeResponse) -> None:
        if self.alive:
            self.endpoint.send_nowait(response)

    def peeks(self) -> list[Peek]:
        return [c for c in self.commands if isinstance(c, Peek)]


class FakeReplica:
    def __init__(
        self,
        rows: dict[GlobalId, list[tuple[Row, int]]] | None = None,
        *,
        answer_peeks: bool = True,
        write_frontier: int = 10,
    ) -> None:
        self.rows = dict(rows or {})
        self.answer_peeks = answer_peeks
        self.write_frontier = write_frontier
        self.refuse = 0
        self.connects = 0
        self.sessions: list[Session] = []
        self._cond = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        self.violations: list[str] = []
        """Protocol violations the controller committed against this replica."""

    @property
    def session(self) -> Session:
        return self.sessions[-1]

    async def connect(self) -> ComputeClient:
        self.connects += 1
        if self.refuse > 0:
            self.refuse -= 1
            await self._notify()
            raise ConnectionRefusedError("fake replica refuses connections")
        ctrl, rep = channel_pair()
        s = Session(rep)
        self.sessions.append(s)
        self._tasks.append(asyncio.create_task(self._serve(s)))
        return ctrl

    async def _notify(self) -> None:
        async with self._cond:
            self._cond.notify_all()

    async def until(self, predicate: Callable[[], bool], what: str = "the fake replica's condition",
                    timeout: float = WAIT) -> None:
        """Wait until `predicate()` holds (re-checked after every event of this replica); a
        predicate that looks at `session` before the first connection simply is not true yet."""

        def check() -> bool:
            try:
                return predicate()
            except IndexError:
                return False

        async def next_event(remaining: float) -> None:
            async with self._cond:  # re-checked under the lock: no notification is missed
                if not check():
                    await asyncio.wait_for(self._cond.wait(), remaining)

        await until(check, what, timeout, next_event)

    def kill(self, exc: BaseException | None = None) -> None:
        """End the current connection: cleanly (`exc=None`) or with `exc` raised to `recv`."""
        s = self.session
        s.alive = False
        if exc is None:
            s.endpoint.close()
        else:
            s.endpoint.fail(exc)

    def answer_pending(self, rows: list[tuple[Row, int]] | None = None) -> None:
        if not self.sessions:
            return
        s = self.session
        for u, p in list(s.pending.items()):
            assert isinstance(p.target, IndexTarget)
            result = PeekRows(rows=rows or self.rows.get(p.target.id, []))
            s.send(PeekResponse(uuid=u, result=result))
            del s.pending[u]

    async def _serve(self, s: Session) -> None:
        try:
            while True:
                cmd = await s.endpoint.recv()
                if cmd is None:
                    return
                s.commands.append(cmd)
                self._handle(s, cmd)
                await self._notify()
        finally:
            s.alive = False
            await self._notify()

    def _check(self, s: Session, cmd: ComputeCommand) -> None:
        n = len(s.commands)
        if (n == 1) != isinstance(cmd, Hello):
            self.violations.append(f"command {n} is {cmd!r}; Hello must come first and once")
        if n == 2 and not isinstance(cmd, CreateInstance):
            self.violations.append(f"second command is {cmd!r}, not CreateInstance")
        if isinstance(cmd, CreateDataflow):
            for e in cmd.dataflow.export_ids():
                if e in s.created:
                    self.violations.append(f"{e} created twice in one iteration")
                s.created.add(e)
        elif isinstance(cmd, Schedule | AllowWrites | AllowCompaction):
            if cmd.id not in s.created and cmd.id.kind != IdKind.INTROSPECTION:
                self.violations.append(f"{cmd!r} names {cmd.id}, never created")
        elif isinstance(cmd, Peek):
            if cmd.uuid in s.peek_uuids:
                self.violations.append(f"peek {cmd.uuid} sent twice in one iteration")
            s.peek_uuids.add(cmd.uuid)
            if isinstance(cmd.target, IndexTarget) and cmd.target.id not in s.created:
                self.violations.append(f"peek of {cmd.target.id}, never created")

    def _handle(self, s: Session, cmd: ComputeCommand) -> None:
        self._check(s, cmd)
        if isinstance(cmd, Hello):
            s.nonce = cmd.nonce
        elif isinstance(cmd, CreateDataflow):
            d = cmd.dataflow
            assert d.as_of is not None and d.as_of.time is not None
            for b in d.objects_to_build:
                if isinstance(b.plan, Constant):
                    for e, (idx, _) in d.index_exports.items():
                        if idx.on_id == b.id:
                            self.rows.setdefault(e, list(b.plan.rows))
            f = Frontier.at(max(self.write_frontier, d.as_of.time))
            for e in d.index_exports:
                s.indexes.add(e)
                s.send(Frontiers(id=e, write_frontier=f, input_frontier=f, output_frontier=f))
            for e in d.copy_to_ids():
                s.send(CopyToResponse(id=e, result=CopyToRowCount(count=len(self.rows))))
        elif isinstance(cmd, Peek):
            if self.answer_peeks:
                assert isinstance(cmd.target, IndexTarget)
                rows = self.rows.get(cmd.target.id, [])
                s.send(PeekResponse(uuid=cmd.uuid, result=PeekRows(rows=rows)))
            else:
                s.pending[cmd.uuid] = cmd
        elif isinstance(cmd, CancelPeek):
            if s.pending.pop(cmd.uuid, None) is not None:
                s.send(PeekResponse(uuid=cmd.uuid, result=PeekCanceled()))
        elif isinstance(cmd, AllowCompaction) and cmd.frontier.is_empty and cmd.id in s.indexes:
            s.indexes.discard(cmd.id)
            s.send(Frontiers(id=cmd.id, write_frontier=E, input_frontier=E, output_frontier=E))

    async def stop(self) -> None:
        """Stop serving; fails the test if the controller violated the protocol."""
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        assert self.violations == [], self.violations
